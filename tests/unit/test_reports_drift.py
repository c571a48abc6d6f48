"""hadmin vc check: config feasibility and config ↔ Slurm drift, each finding with its fix."""

from __future__ import annotations

from dataclasses import dataclass, field

from report_scenario import config_data

from hivebatch.reports.drift import ERROR, OK, WARNING, config_findings, drift_findings, qos_classes
from hivebatch.reports.topology import node_layouts, vc_infos


@dataclass
class LiveNode:
    name: str
    state: str = "IDLE"
    bad: bool = False
    gpu_indices: list[int] = field(default_factory=lambda: list(range(8)))
    gpus_used: list[int] = field(default_factory=list)
    reason: str = ""


def test_feasible_config_is_ok() -> None:
    data = config_data()
    findings = config_findings(data, vc_infos(data), node_layouts(data))
    assert all(f.severity == OK for f in findings)
    assert findings[0].what == "config feasible: 3 VCs reserve 32 of 32 GPUs on 4 nodes"


def test_infeasible_config_is_one_error_naming_the_level() -> None:
    data = config_data()
    data["virtual_clusters"]["nlp"]["cells"]["V100-NODE"] = 4  # 4 nodes for nlp + cv's node: 5 of 4
    findings = config_findings(data, vc_infos(data), [])
    assert [f.severity for f in findings] == [ERROR]
    assert "V100-NODE" in findings[0].what and "edit" in findings[0].fix


def test_drift_nodes_gpus_health_accounts_and_qos() -> None:
    data = config_data()
    layouts, vcs = node_layouts(data), vc_infos(data)
    live = [
        LiveNode("node1"),
        LiveNode("node2", gpu_indices=[0, 1, 2, 3]),
        LiveNode("node3", state="DRAIN", bad=True, reason="fan"),
        LiveNode("node9"),
    ]
    findings = drift_findings(
        layouts, vcs, qos_classes(data), live, ["cv", "nlp", "hivebatch"], ["normal", "urgent"]
    )
    by_text = {f.what: f for f in findings}
    assert (
        by_text["node node4 is in the config but not in Slurm: its cells can never be used"].severity == ERROR
    )
    gpus = by_text["node node2: the config has GPUs 0-7 but Slurm has 0-3"]
    assert gpus.severity == ERROR and "gpu:g7" in gpus.fix
    drain = next(f for f in findings if f.what.startswith("node node3 is DRAIN (fan)"))
    assert (
        drain.severity == WARNING
        and drain.fix == "once repaired: scontrol update NodeName=node3 State=RESUME"
    )
    extra = next(
        f for f in findings if f.what.startswith("node node9 (8 GPUs) is in Slurm but not in the config")
    )
    assert extra.severity == WARNING
    account = next(f for f in findings if f.what.startswith("VC sys has no Slurm account"))
    assert account.fix.startswith("sacctmgr -i add account sys")
    missing_qos = sorted(f.what.split()[1] for f in findings if f.what.startswith("QOS "))
    assert missing_qos == ["opportunistic", "prior"]
    assert sum(f.severity == ERROR for f in findings) == 5


def test_matching_slurm_is_all_ok_and_unknown_accounting_is_a_warning() -> None:
    data = config_data()
    live = [LiveNode(f"node{i}") for i in range(1, 5)]
    findings = drift_findings(node_layouts(data), vc_infos(data), ["urgent", "prior", "normal"], live,
                              ["cv", "nlp", "sys"], ["urgent", "prior", "normal", "opportunistic"])  # fmt: skip
    assert all(f.severity == OK for f in findings)
    findings = drift_findings(
        node_layouts(data), vc_infos(data), ["normal"], None, None, None, "sinfo failed"
    )
    assert [f.severity for f in findings] == [WARNING, WARNING]
    assert "sinfo failed" in findings[0].what


def test_the_opportunistic_grace_is_checked_against_the_configs_notice() -> None:
    from hivebatch.reports.drift import grace_finding

    assert grace_finding(120, None) is None  # not known: nothing said
    ok = grace_finding(120, 120)
    assert ok is not None and ok.severity == OK
    drift = grace_finding(120, 0)
    assert drift is not None and drift.severity == WARNING
    assert drift.what.startswith(
        "QOS opportunistic has GraceTime 0 s, but the config gives opportunistic jobs 120 s"
    )
    assert drift.fix == "sacctmgr -i modify qos where name=opportunistic set GraceTime=120"


def test_sacctmgr_grace_times_are_read_as_seconds() -> None:
    from hivebatch.slurm.cli import grace_seconds

    # sacctmgr -n -P show qos opportunistic format=GraceTime, recorded on the lab (preempt_grace.txt)
    assert [grace_seconds(t) for t in ("00:00:00", "00:02:00", "00:00:30", "1-00:00:00")] == [
        0,
        120,
        30,
        86400,
    ]
    assert grace_seconds("soon") is None
