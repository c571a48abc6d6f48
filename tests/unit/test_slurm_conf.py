"""slurm.conf / gres.conf / sacctmgr generation from the cell config (hadmin slurm-config)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hivebatch.cli.hadmin.main import cli as hadmin
from hivebatch.errors import ConfigError
from hivebatch.slurmconf import (
    AccountingPlan,
    LabOptions,
    NodeHardware,
    accounting_commands,
    cluster_layout,
    gres_conf,
    parse_user_specs,
    slurm_conf,
)

PROLOG = Path("/etc/slurm/hivebatch-task-prolog.sh")

CONFIG = {
    "cluster": {
        "cell_types": {
            "V100": {"memory": "32G"},
            "V100-SWITCH": {"child": "V100", "count": 2},
            "V100-SOCKET": {"child": "V100-SWITCH", "count": 2},
            "V100-NODE": {"child": "V100-SOCKET", "count": 2, "node": True},
        },
        "physical_cells": [{"type": "V100-NODE", "nodes": [f"node{i}"]} for i in range(1, 5)],
    },
    "virtual_clusters": {
        "cv": {"cells": {"V100-NODE": 2}},
        "nlp": {"cells": {"V100-NODE": 1}},
        "sys": {"cells": {"V100-SOCKET": 2}},
    },
}


@pytest.fixture
def layout():
    return cluster_layout(CONFIG)


def test_layout(layout):
    assert [n.name for n in layout.nodes] == ["node1", "node2", "node3", "node4"]
    n = layout.nodes[0]
    assert n.gpu_indices == list(range(8)) and n.sockets == 2 and n.gpu_type == "V100"
    assert [n.socket_of[i] for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert n.gpu_memory_mib == 32768 and n.shards_per_gpu() == 32
    assert set(layout.vcs) == {"cv", "nlp", "sys"}


def test_node_lines_one_type_per_gpu_index_and_shards(layout):
    text = slurm_conf(layout, NodeHardware(), PROLOG)
    line = next(x for x in text.splitlines() if x.startswith("NodeName=node2"))
    gres = re.search(r"Gres=(\S+)", line).group(1).split(",")
    assert gres[:8] == [f"gpu:g{i}:1" for i in range(8)]
    assert gres[8:] == [f"shard:g{i}:32" for i in range(8)]
    assert "Sockets=2 CoresPerSocket=8" in line
    assert "GresTypes=gpu,shard" in text and "PreemptType=preempt/qos" in text
    assert "gres/gpu:g7" in text  # typed TRES let sacct tell which GPUs a job held
    assert "Port=" not in text  # a real cluster's lines carry no lab ports
    assert "PartitionName=gpu Nodes=node1,node2,node3,node4" in text


def test_no_shards_flag(layout):
    text = slurm_conf(layout, NodeHardware(), PROLOG, shards=False)
    assert "shard" not in text and "GresTypes=gpu\n" in text
    assert "shard" not in gres_conf(layout, NodeHardware(), shards=False)


def test_gres_conf_cores_by_socket(layout):
    lines = gres_conf(
        layout, NodeHardware(cores_per_socket=4), shards=True, device_dir="/lab/dev"
    ).splitlines()
    assert "NodeName=node1 Name=gpu Type=g3 File=/lab/dev/nvidia3 Cores=0-3" in lines
    assert "NodeName=node4 Name=gpu Type=g4 File=/lab/dev/nvidia4 Cores=4-7" in lines
    assert "NodeName=node2 Name=shard Type=g5 Count=32 File=/lab/dev/nvidia5 Cores=4-7" in lines
    assert sum(1 for x in lines if " Name=gpu " in x) == 32


def test_lab_conf_is_complete(layout, tmp_path):
    text = slurm_conf(layout, NodeHardware(), PROLOG, lab=LabOptions(state_dir=tmp_path))
    for needed in (
        "ClusterName=hivebatch",
        "SlurmdParameters=config_overrides",
        f"StateSaveLocation={tmp_path}/state",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "DefMemPerCPU=",
    ):
        assert needed in text
    ports = re.findall(r"NodeName=node\d .*Port=(\d+)", text)
    assert ports == ["17001", "17002", "17003", "17004"]
    assert "5432" not in text


def test_accounting_commands():
    plan = AccountingPlan("hivebatch", ["cv", "nlp"], {"alice": ["cv"]}, ["hbctl"])
    cmds = [" ".join(c) for c in accounting_commands(plan)]
    assert cmds[0] == "sacctmgr -i add cluster hivebatch"
    assert "sacctmgr -i add qos urgent prior opportunistic" in cmds
    assert (
        "sacctmgr -i modify qos where name=opportunistic set Priority=0 PreemptMode=requeue GraceTime=0"
        in cmds
    )
    assert "sacctmgr -i modify qos where name=urgent set Priority=1000 Preempt=opportunistic" in cmds
    assert any(c.startswith("sacctmgr -i add account cv ") and "DefaultQOS=normal" in c for c in cmds)
    assert any(c.startswith("sacctmgr -i add user alice Account=cv") for c in cmds)
    assert "sacctmgr -i modify user where name=hbctl set AdminLevel=Operator" in cmds
    assert all(isinstance(a, str) for c in accounting_commands(plan) for a in c)


def test_the_opportunistic_qos_grace_is_the_configs_notice_for_that_class():
    from hivebatch.slurmconf_files import ConfigOptions, config_files

    data = dict(CONFIG)
    data["preemption"] = {"notice_s": 300, "notice_s_by_class": {"opportunistic": 45}}
    script = config_files(data, ConfigOptions())["accounts.sh"][0]
    assert "name=opportunistic set Priority=0 PreemptMode=requeue GraceTime=45" in script
    data["preemption"] = {"notice_s": 90}
    assert "GraceTime=90" in config_files(data, ConfigOptions())["accounts.sh"][0]
    del data["preemption"]
    assert "GraceTime=120" in config_files(data, ConfigOptions())["accounts.sh"][0]  # the default notice


def test_preempted_jobs_get_their_own_signal_from_slurm_too():
    from hivebatch.slurmconf import merge_into

    generated = "PreemptType=preempt/qos\nSlurmctldParameters=preempt_send_user_signal\n"
    merged, warnings = merge_into("SlurmctldParameters=enable_configless,idle_on_node_suspend\n", generated)
    lines = merged.splitlines()
    assert "SlurmctldParameters=enable_configless,idle_on_node_suspend,preempt_send_user_signal" in lines
    assert warnings == []
    merged, _ = merge_into("SlurmctldParameters=preempt_send_user_signal,enable_configless\n", generated)
    assert "SlurmctldParameters=preempt_send_user_signal,enable_configless" in merged.splitlines()
    merged, _ = merge_into("ClusterName=x\n", generated)
    assert "SlurmctldParameters=preempt_send_user_signal" in merged.splitlines()


def test_user_specs():
    assert parse_user_specs(["alice=cv", "bob=cv,nlp"], ["cv", "nlp"]) == {
        "alice": ["cv"],
        "bob": ["cv", "nlp"],
    }
    with pytest.raises(ConfigError, match="not a virtual cluster"):
        parse_user_specs(["alice=zzz"], ["cv"])
    with pytest.raises(ConfigError, match="USER=ACCOUNT"):
        parse_user_specs(["alice; rm -rf /=cv"], ["cv"])


def test_infeasible_config_is_refused():
    data = {**CONFIG, "virtual_clusters": {"cv": {"cells": {"V100-NODE": 9}}}}
    with pytest.raises(ConfigError):
        cluster_layout(data)


def _write(tmp_path: Path, data) -> Path:
    p = tmp_path / "hivebatch.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_cli_prints_to_stdout(tmp_path):
    res = CliRunner().invoke(
        hadmin, ["slurm-config", "--config", str(_write(tmp_path, CONFIG)), "--user", "alice=cv"]
    )
    assert res.exit_code == 0, res.output
    assert "# ==> slurm.conf <==" in res.output and "# ==> gres.conf <==" in res.output
    assert "sacctmgr -i add user alice Account=cv" in res.output


def test_cli_writes_files_once(tmp_path):
    cfg = _write(tmp_path, CONFIG)
    out = tmp_path / "out"
    args = [
        "slurm-config",
        "--config",
        str(cfg),
        "--out",
        str(out),
        "--lab-dir",
        str(tmp_path / "lab"),
        "--operator",
        "hbctl",
    ]
    res = CliRunner().invoke(hadmin, args)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == [
        "accounts.sh",
        "cli_filter.lua",
        "gres.conf",
        "hivebatch-task-prolog.sh",
        "job_submit.lua",
        "slurm.conf",
        "slurmdbd.conf",
    ]
    assert (out / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600
    # the models srun may name, lower case as slurm.conf names them as node features
    text = (out / "cli_filter.lua").read_text()
    assert "HIVEBATCH_GPU_MODELS = {" in text.splitlines()[1] and '["v100"] = true' in text.splitlines()[1]
    # the Operators, whose new jobs over several nodes the filter leaves as they asked
    assert text.splitlines()[2] == 'HIVEBATCH_OPERATORS = { ["root"] = true, ["hbctl"] = true }'
    assert "Features=v100" in (out / "slurm.conf").read_text()
    again = CliRunner().invoke(hadmin, args)
    assert "unchanged" in again.output


def test_writing_the_files_says_where_the_plugins_refusal_notes_need_a_directory(tmp_path):
    notes = tmp_path / "spool" / "refused.log"
    data = {**CONFIG, "controller": {"refusals_file": str(notes)}}
    args = ["slurm-config", "--config", str(_write(tmp_path, data)), "--out", str(tmp_path / "out")]
    res = CliRunner().invoke(hadmin, args)
    assert res.exit_code == 0, res.output
    assert f"note: create {notes.parent} on the slurmctld host" in res.output
    notes.parent.mkdir()
    assert "note:" not in CliRunner().invoke(hadmin, args).output


def test_cli_bad_config_one_line(tmp_path):
    from hivebatch.cli.common import run_cli

    bad = _write(tmp_path, {"virtual_clusters": {}})
    with pytest.raises(SystemExit) as ex:
        run_cli(hadmin, ["slurm-config", "--config", str(bad), "--out", str(tmp_path / "o")])
    assert ex.value.code == 1
    assert not (tmp_path / "o").exists()


def test_site_output_has_no_lab_tuning_unless_asked(tmp_path):
    args = ["slurm-config", "--config", str(_write(tmp_path, CONFIG))]
    site = CliRunner().invoke(hadmin, args).output
    assert "sched_interval" not in site and "cred_expire" not in site and "Default=YES" not in site
    lab = CliRunner().invoke(hadmin, [*args, "--lab"]).output
    assert "sched_interval=2" in lab and "cred_expire=10" in lab and "Default=YES" in lab


def test_diff_against_a_sites_slurm_conf_warns_before_retyping_gpus(tmp_path):
    site = Path(__file__).resolve().parents[1] / "fixtures" / "slurmconf" / "site-typed-v100.conf"
    before = site.read_text()
    res = CliRunner().invoke(
        hadmin, ["slurm-config", "--config", str(_write(tmp_path, CONFIG)), "--diff", str(site)]
    )
    assert res.exit_code == 0, res.output
    assert "warning: NodeName=node[1-4]: its GPUs typed v100 become one type per index" in res.stderr
    out = res.stdout
    assert "-SelectType=select/cons_res\n+SelectType=select/cons_tres\n" in out
    assert (
        "-GresTypes=gpu\n" in out
        and "+NodeName=node[1-4] CPUs=32 RealMemory=256000 State=UNKNOWN Gres=gpu:g0:1," in out
    )
    assert " PartitionName=main Nodes=node[1-4] Default=YES" in out  # the site's default partition stays
    assert "+PartitionName=gpu Nodes=node1,node2,node3,node4 MaxTime=INFINITE State=UP" in out
    assert " SchedulerParameters=bf_continue\n" in out  # the site's timing stays
    assert site.read_text() == before  # --diff writes nothing


def test_lab_files_move_every_port_and_use_the_labs_devices(tmp_path):
    from hivebatch.slurmconf_files import ConfigOptions, config_files

    base = config_files(CONFIG, ConfigOptions(lab_dir=tmp_path / "lab"))
    moved = config_files(CONFIG, ConfigOptions(lab_dir=tmp_path / "lab", lab_port_offset=200))
    assert "SlurmctldPort=16817" in base["slurm.conf"][0]
    assert "SlurmctldPort=17017" in moved["slurm.conf"][0]
    assert "DbdPort=16819" in base["slurmdbd.conf"][0] and "DbdPort=17019" in moved["slurmdbd.conf"][0]
    assert f"File={(tmp_path / 'lab').resolve()}/dev/nvidia0" in moved["gres.conf"][0]
    site = config_files(CONFIG, ConfigOptions())
    assert "slurmdbd.conf" not in site and "File=/dev/nvidia0" in site["gres.conf"][0]


def test_write_files_replaces_only_what_changed(tmp_path):
    from hivebatch.slurmconf_files import write_files

    out = tmp_path / "out"
    assert write_files(out, {"a": ("one\n", 0o644), "b": ("two\n", 0o755)}) == ["a", "b"]
    assert (out / "b").stat().st_mode & 0o777 == 0o755
    assert write_files(out, {"a": ("one\n", 0o644), "b": ("TWO\n", 0o755)}) == ["b"]
    assert (out / "b").read_text() == "TWO\n"
    assert sorted(p.name for p in out.iterdir()) == ["a", "b"]  # no staged leftovers


def test_the_task_prolog_is_written_next_to_slurm_conf_and_named_there(tmp_path):
    from hivebatch.slurmconf_files import TASK_PROLOG, ConfigOptions, config_files

    files = config_files(CONFIG, ConfigOptions(lab_dir=tmp_path / "lab", conf_dir=tmp_path / "etc"))
    assert f"TaskProlog={tmp_path / 'etc' / TASK_PROLOG}\n" in files["slurm.conf"][0]
    text, mode = files[TASK_PROLOG]
    assert text.startswith("#!/bin/sh") and mode == 0o755


@pytest.mark.parametrize(
    ("env", "unset"),
    [
        # what a --mem-per-gpu job hivebatch placed has: sbatch's per-GPU figure, slurmstepd's per-node one
        ({"SLURM_MEM_PER_GPU": "4096", "SLURM_MEM_PER_NODE": "8192"}, ["SLURM_MEM_PER_NODE"]),
        ({"SLURM_MEM_PER_GPU": "4096", "SLURM_MEM_PER_CPU": "2000"}, ["SLURM_MEM_PER_CPU"]),
        ({"SLURM_MEM_PER_GPU": "4096"}, []),  # a plain Slurm --mem-per-gpu job
        ({"SLURM_MEM_PER_NODE": "8192"}, []),
        ({"SLURM_MEM_PER_CPU": "2000"}, []),
    ],
)
def test_the_task_prolog_leaves_srun_one_memory_figure(tmp_path, env, unset):
    import subprocess

    from hivebatch.slurmconf_files import TASK_PROLOG, ConfigOptions, config_files

    script = tmp_path / TASK_PROLOG
    text, mode = config_files(CONFIG, ConfigOptions(conf_dir=tmp_path))[TASK_PROLOG]
    script.write_text(text)
    script.chmod(mode)
    done = subprocess.run([str(script)], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines() == [f"unset {name}" for name in unset]


def test_merging_keeps_a_sites_own_task_prolog_and_says_what_to_add():
    from hivebatch.slurmconf import merge_into

    generated = f"TaskProlog={PROLOG}\nJobSubmitPlugins=lua\n"
    merged, warnings = merge_into("TaskProlog=/site/prolog.sh\nClusterName=x\n", generated)
    assert "TaskProlog=/site/prolog.sh" in merged and f"TaskProlog={PROLOG}" not in merged
    assert warnings == [
        f"TaskProlog: yours (/site/prolog.sh) stays; add the lines of {PROLOG} to it "
        "(an srun inside a --mem-per-gpu job needs them)"
    ]
    merged, warnings = merge_into("ClusterName=x\n", generated)
    assert f"TaskProlog={PROLOG}" in merged and warnings == []


def test_merging_stacks_hivebatchs_cli_filter_on_the_sites_own():
    from hivebatch.slurmconf import merge_into

    generated = "CliFilterPlugins=cli_filter/lua\nJobSubmitPlugins=lua\n"
    merged, warnings = merge_into("CliFilterPlugins=cli_filter/syslog\nClusterName=x\n", generated)
    assert "CliFilterPlugins=cli_filter/syslog,cli_filter/lua" in merged.splitlines() and warnings == []
    merged, warnings = merge_into("CliFilterPlugins=cli_filter/lua\n", generated)
    assert merged.splitlines()[0] == "CliFilterPlugins=cli_filter/lua"
    assert warnings and "add hivebatch's rules" in warnings[0]
    merged, _ = merge_into("ClusterName=x\n", generated)
    assert "CliFilterPlugins=cli_filter/lua" in merged.splitlines()


@pytest.mark.parametrize(
    ("site", "warned"),
    [
        ("PartitionName=mine Nodes=node[1-2] ExclusiveUser=YES\n", "PartitionName=mine: ExclusiveUser=YES"),
        ("PartitionName=all Nodes=ALL exclusiveuser=yes\n", "PartitionName=all: ExclusiveUser=YES"),
        ("MCSPlugin=mcs/user\n", "MCSPlugin=mcs/user: --exclusive=mcs jobs keep other groups off"),
        ("PartitionName=cpu Nodes=cpu[01-04] ExclusiveUser=YES\n", None),  # no GPU node of the cells
        ("PartitionName=gpu2 Nodes=node[1-2] ExclusiveUser=NO\n", None),
        ("MCSPlugin=mcs/none\n", None),
    ],
)
def test_merging_warns_of_settings_that_keep_users_apart_on_gpu_nodes(site, warned):
    from hivebatch.slurmconf import merge_into

    generated = "JobSubmitPlugins=lua\nNodeName=node[1-2] CPUs=16 Gres=gpu:g0:1\n"
    merged, warnings = merge_into(site, generated)
    assert site.strip() in merged.splitlines()
    if warned is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warnings[0].startswith(warned)
