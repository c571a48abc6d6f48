"""hadmin report / cluster / events / vc check through click, on the scripted day's ledger."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from recorded_output import recorded_output
from report_scenario import make_db, write_config

from hivebatch.cli.hadmin.main import cli
from hivebatch.config import load_config
from hivebatch.controller.node_sizes import node_sizes_lua
from hivebatch.jobsubmit import followed_table
from hivebatch.testing.fake_slurm import FakeSlurm

WINDOW = ["--since", "2026-11-16", "--until", "2026-11-16T10:00"]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = write_config(tmp_path)
    make_db(tmp_path / "hivebatch.db")  # the config's database.url is relative to its directory
    monkeypatch.setenv("HIVEBATCH_CONFIG", str(path))
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    monkeypatch.setattr("hivebatch.slurm.get_backend", lambda name=None: FakeSlurm())
    return path


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_quota_table_piped_is_plain_columns(config: Path) -> None:
    out = run("report", "quota", *WINDOW)
    lines = out.splitlines()
    assert lines[0] == "GPU usage per VC"
    nlp = next(line for line in lines if line.startswith("nlp "))
    assert (
        "140.0" in nlp
        and "88%" in nlp
        and "full: 88% of its reservation used, 1 pending, oldest waits 8.0h" in nlp
    )
    assert next(line for line in lines if line.startswith("total ")).split()[1:4] == ["32", "183.0", "28.0"]
    assert " 8/8 of 16 " in nlp  # used now / healthy capacity of the 16 GPUs it reserves
    assert "nlp now: capacity reduced by 8 GPUs" in out
    assert "Deadlines: 4 of 6 jobs met their ECT (67%);" in out
    assert "Missed their ECT: 102 (alice/cv/prior), 105 (bob/nlp/normal)" in out
    assert "Waiting now: 105 (bob/nlp/normal, 8 GPUs, 8.0h: VC nlp has 8 healthy GPUs" in out
    assert out.rstrip().endswith(
        "Free GPUs now: 13 GPUs free, 13 scattered over 2 partly used nodes; largest free block 7 GPUs on one node;"
        " fragmented on node4 (7 free), node1 (6 free); bad nodes: node2."
    )


def test_quota_json_and_csv(config: Path) -> None:
    data = json.loads(run("report", "quota", *WINDOW, "--format", "json"))
    assert data["totals"]["gpu_hours_guaranteed"] == 183.0
    assert data["totals"]["qos_overall"] == {"met": 4, "total": 6, "rate": 0.6667}
    sys_vc = next(v for v in data["vcs"] if v["vc"] == "sys")
    assert sys_vc["verdict"] == "starved" and sys_vc["preempted_gpu_hours"] == 14.0
    rows = list(csv.DictReader(io.StringIO(run("report", "quota", *WINDOW, "--format", "csv"))))
    assert [r["vc"] for r in rows] == ["cv", "nlp", "sys", "TOTAL"]
    assert rows[0]["excess_queue_s"] == "900.0"
    assert rows[3]["qos_normal_met"] == "3" and rows[3]["qos_normal_total"] == "4"


def test_quota_for_one_vc(config: Path) -> None:
    data = json.loads(run("report", "quota", *WINDOW, "--vc", "cv", "--format", "json"))
    assert [v["vc"] for v in data["vcs"]] == ["cv"]
    assert data["totals"]["gpu_hours_guaranteed"] == 42.0
    assert data["totals"]["gpus"] == 12 and data["totals"]["utilization"] == 0.35  # against cv's own 12 GPUs


def test_users_report(config: Path) -> None:
    out = run("report", "users", *WINDOW)
    assert out.splitlines()[0] == "GPU usage per user"
    assert [line.split()[0] for line in out.splitlines()[3:6]] == ["bob", "alice", "carol"]
    assert "  carol: preempted 4×, 14.0 GPU-h lost (checkpoint, or submit as a guaranteed class)" in out
    data = json.loads(run("report", "users", *WINDOW, "--format", "json", "--vc", "sys"))
    assert [u["user"] for u in data["users"]] == ["carol"]
    assert data["users"][0]["preemptions"] == 4


def test_html_report_file(config: Path, tmp_path: Path) -> None:
    target = tmp_path / "out" / "report.html"
    target.parent.mkdir()
    out = run("report", "html", *WINDOW, "--no-slurm", str(target))
    assert out.startswith(f"wrote {target}")
    page = target.read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == 3
    assert 'id="usage"' in page and 'id="wait"' in page and 'id="users"' in page and 'id="gpumap"' in page
    assert "full: 88% of its reservation used" in page
    assert not list(target.parent.glob(".report.html.*"))  # no temporary file left behind


def test_html_report_with_png_plots(config: Path, tmp_path: Path) -> None:
    plots = tmp_path / "plots"
    out = run("report", "html", *WINDOW, "--no-slurm", "--plots", str(plots), str(tmp_path / "r.html"))
    names = ["gpus-in-use.png", "queuing-delay.png", "qos-rate.png", "gpu-map.png"]
    assert f"wrote 4 plots into {plots}: {', '.join(names)}" in out
    for name in names:
        data = (plots / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000


def test_quota_as_html_on_stdout(config: Path) -> None:
    page = run("report", "quota", *WINDOW, "--format", "html")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count('<table class="report"') == 5  # usage, wait, missed, waiting, users


def test_cluster_and_events(config: Path) -> None:
    out = run("cluster", "--no-slurm")
    assert (
        "node1  -        -        | -        -        || -        -        | nlp:110* nlp:110*  (6 free)"
        in out
    )
    assert "Fragmented: node4 (7 free), node1 (6 free)." in out
    data = json.loads(run("cluster", "--no-slurm", "--format", "json"))
    assert data["fragmentation"]["largest_block"] == 7
    events = json.loads(run("events", "--job", "108", "--format", "json"))
    assert [e["kind"] for e in events] == ["submitted", "started", "preempted", "started", "finished"]
    assert run("events", "--kind", "node_bad").count("node node2 is bad") == 1
    assert "no events for job 999" in run("events", "--job", "999")


def test_cluster_lists_the_reservations_slurm_has(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an admin planning maintenance sees the window the controller keeps long jobs out of
    fake = FakeSlurm()
    fake.reserve("maint1", ["node1", "node2"], start_in_s=1800, duration_s=3600)
    monkeypatch.setattr("hivebatch.slurm.get_backend", lambda name=None: fake)
    (resv,) = fake.list_reservations()
    out = run("cluster")
    assert (
        f"Reservation maint1: node1, node2 from {resv.start:%Y-%m-%d %H:%M} to {resv.end:%Y-%m-%d %H:%M} UTC"
        " (a job not in it starts there only if its time limit ends before)"
    ) in out
    data = json.loads(run("cluster", "--format", "json"))
    assert data["reservations"] == [
        {
            "name": "maint1",
            "nodes": ["node1", "node2"],
            "start": resv.start.isoformat(),
            "end": resv.end.isoformat(),
        }
    ]
    assert "Reservation" not in run("cluster", "--no-slurm")


def test_vc_check_config_only(config: Path) -> None:
    out = run("vc", "check", "--no-slurm")
    assert "ok     config feasible: 3 VCs reserve 32 of 32 GPUs on 4 nodes" in out
    assert "ok     VC sys: 1×V100-SWITCH, 2×V100 = 4 GPUs" in out


def test_vc_check_exits_1_on_an_error_and_reads_every_section(config: Path, tmp_path: Path) -> None:
    import os

    env = {**os.environ, "HIVEBATCH_CONFIG": str(config)}
    good = _hadmin("vc", "check", "--no-slurm", env=env)
    assert good.returncode == 0 and "ok     the controller reads every section of the config" in good.stdout
    # a section besides the cells that the controller refuses: vc check passed it, and exited 0 on errors
    bad = tmp_path / "bad.yaml"
    bad.write_text(config.read_text() + "limits: {time_limit_s: 99999999}\n")
    out = _hadmin("vc", "check", "--no-slurm", "--config", str(bad), env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert (
        "ERROR  the controller cannot start on this config: limits.time_limit_s may be at most 31536000 (a year), "
        "got 99999999"
    ) in out.stdout.splitlines()
    assert out.stdout.splitlines()[-1].startswith("1 error(s), 0 warning(s) in ")


def _hadmin(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from hivebatch.cli.hadmin.main import main; main()", *args],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "quota", "--vc", "bio"], "error: unknown VC 'bio': the config defines cv, nlp, sys"),
        (["report", "quota", "--since", "last tuesday"], "error: cannot read date 'last tuesday'"),
        (
            ["report", "users", "--since", "2026-11-17", "--until", "2026-11-16"],
            "error: --since must be before",
        ),
        (["events", "--job", "x1"], "error: --job wants a Slurm job id (a number), got 'x1'"),
        (
            ["report", "html", "--no-slurm", "/nonexistent-dir/r.html"],
            "error: cannot write /nonexistent-dir/r.html",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_1(config: Path, args: list[str], message: str) -> None:
    import os

    result = _hadmin(*args, env={**os.environ})
    assert result.returncode == 1
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_rich_tables_on_a_terminal() -> None:
    from hivebatch.reports.tables import TextTable, print_tables

    table = TextTable(
        "GPU usage per VC", ["VC", "GPU-h"], [["cv", "42.0"]], right={1}, footer=["total", "42.0"]
    )
    table.styles[(0, 0)] = "bold red"
    out = io.StringIO()
    print_tables([table], out=out, notes=["a [note] kept literally"], terminal=True)
    text = out.getvalue()
    assert "┏━━━━━━━┳━━━━━━━┓" in text and "\x1b[" in text and "a [note] kept literally" in text
    plain = io.StringIO()
    print_tables([table], out=plain, terminal=False)
    assert plain.getvalue().splitlines() == ["GPU usage per VC", "VC     GPU-h", "-----  -----", "cv      42.0",
                                             "-----  -----", "total   42.0"]  # fmt: skip


def test_unmigrated_ledger_is_one_line(config: Path, tmp_path: Path) -> None:
    import os
    import sqlite3

    db = tmp_path / "hivebatch.db"
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE jobs DROP COLUMN gpu_hours_lost")  # a ledger from an older schema
    result = _hadmin("report", "quota", env={**os.environ})
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: cannot read the hivebatch database: no such column: jobs.gpu_hours_lost "
        "(is it migrated? run `hivebatch db upgrade`)"
    )


class _Backend:
    """A backend that can list accounts and QOS (the CLI backend does it with sacctmgr)."""

    def list_nodes(self) -> list[object]:
        from hivebatch.slurm import SlurmNode

        nodes = [SlurmNode(f"node{i}", "IDLE", False, list(range(8))) for i in (1, 2, 3)]
        return [*nodes, SlurmNode("node4", "DRAIN", True, list(range(8)), reason="fan")]

    def list_accounts(self) -> list[str]:
        return ["cv", "nlp"]

    def list_qos(self) -> list[str]:
        return ["normal", "urgent", "prior", "opportunistic"]

    def qos_grace_s(self, qos: str) -> int | None:
        return 0 if qos == "opportunistic" else None  # as before hadmin slurm-config set it

    def gpu_group_limits(self) -> list[object]:
        from hivebatch.slurm.cli import gpu_group_limits

        return gpu_group_limits(recorded_output("sacctmgr_assoc_grptres.txt"))


def _install_plugin(config: Path, slurm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """job_submit.lua written from ``config`` beside the slurm.conf $SLURM_CONF names."""
    from hivebatch.config import load_config
    from hivebatch.jobsubmit import job_submit_lua

    slurm_dir.mkdir(exist_ok=True)
    (slurm_dir / "job_submit.lua").write_text(job_submit_lua(load_config(str(config))[1], [], slurm_dir))
    monkeypatch.setenv("SLURM_CONF", str(slurm_dir / "slurm.conf"))


def test_vc_check_against_slurm_prints_fixes_and_fails(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("hivebatch.slurm.get_backend", lambda *a, **k: _Backend())
    _install_plugin(config, tmp_path / "slurm", monkeypatch)
    # /etc/slurm/slurm.conf a link to the real one, as on the lab: slurmctld's plugin is beside the real one
    (tmp_path / "slurm" / "slurm.conf").write_text("ClusterName=x\n")
    (tmp_path / "etc-slurm").mkdir()
    (tmp_path / "etc-slurm" / "slurm.conf").symlink_to(tmp_path / "slurm" / "slurm.conf")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "etc-slurm" / "slurm.conf"))
    result = CliRunner().invoke(cli, ["vc", "check"], catch_exceptions=False)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert (
        "WARN   node node4 is DRAIN (fan): no new work goes there and VCs bound to it lose capacity" in lines
    )
    assert "       fix: once repaired: scontrol update NodeName=node4 State=RESUME" in lines
    i = lines.index(
        "ERROR  VC sys has no Slurm account: its users cannot submit (hsub uses the VC as the account)"
    )
    assert lines[i + 1] == "       fix: sacctmgr -i add account sys && sacctmgr -i add user USER account=sys"
    assert "ok     every class is a Slurm QOS (urgent, prior, normal, opportunistic)" in lines
    i = next(i for i, ln in enumerate(lines) if ln.startswith("WARN   QOS opportunistic has GraceTime 0 s"))
    assert lines[i + 1] == "       fix: sacctmgr -i modify qos where name=opportunistic set GraceTime=120"
    assert f"ok     job_submit.lua was written for this config: {tmp_path / 'slurm'}/job_submit.lua" in lines
    # the recorded GrpTRES: cv's 4 and alice's 2 are below cv's 12 GPUs; sys's 8 is above its 4
    i = lines.index(
        "WARN   Slurm caps account cv's GPUs at 4 (GrpTRES), below VC cv's 12: Slurm holds its jobs back "
        "(AssocGrpGRES) where the cells have room"
    )
    assert (
        lines[i + 1]
        == "       fix: sacctmgr -i modify account cv set GrpTRES=gres/gpu=-1 (the cells are the VC's quota)"
    )
    assert lines[i + 2].startswith("WARN   Slurm caps alice's GPUs in account cv at 2 (GrpTRES)")
    assert lines[i + 3] == (
        "       fix: sacctmgr -i modify user alice where account=cv set GrpTRES=gres/gpu=-1 "
        "(limits per user belong in hivebatch's user_limits:)"
    )
    assert len([ln for ln in lines if ln.startswith("WARN   Slurm caps")]) == 2
    assert lines[-1].startswith("1 error(s), 4 warning(s) in ")


def test_vc_check_finds_a_plugin_written_for_another_config(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("hivebatch.slurm.get_backend", lambda *a, **k: _Backend())
    old = tmp_path / "old.yaml"
    old.write_text(config.read_text().replace("sys: {cells: {V100-SWITCH: 1, V100: 2}}", ""))
    assert old.read_text() != config.read_text()
    slurm = tmp_path / "slurm"
    _install_plugin(old, slurm, monkeypatch)

    def check() -> list[str]:
        return CliRunner().invoke(cli, ["vc", "check"], catch_exceptions=False).output.splitlines()

    stale = f"{slurm}/job_submit.lua was written for another config (its VCs differ from this one's): "
    error = f"ERROR  {stale}it checks jobs against its own, as the controller's copy of this config cannot be used ("
    fix = f"       fix: hadmin slurm-config --out NEWDIR, then copy NEWDIR/job_submit.lua to {slurm} (slurmctld reloads it)"
    copy = slurm / "hivebatch_nodes.lua"
    lines = check()
    i = lines.index(f"{error}there is no {copy})")
    assert lines[i + 1] == fix

    # the controller's node sizes file, as a cycle on ``written`` writes it for the config ``source``
    def controller_wrote(source: Path, written: dt.datetime) -> None:
        site = followed_table(load_config(str(source))[1])
        copy.write_text(node_sizes_lua({"any": {"cpus": 16}}, written, None, site))

    now = dt.datetime.now(dt.UTC)
    controller_wrote(config, now)
    lines = check()
    i = next(i for i, ln in enumerate(lines) if ln.startswith(f"WARN   {stale}"))
    assert re.fullmatch(
        re.escape(f"WARN   {stale}it checks jobs against the controller's copy of this config ({copy}, ")
        + r"[01] s old\), and against its own once that copy is over 300 s old \(the controller stopped\)",
        lines[i],
    )
    assert lines[i + 1] == fix
    controller_wrote(config, now - dt.timedelta(hours=1))
    assert any(
        re.fullmatch(re.escape(f"{error}{copy} is ") + r"360[01] s old: is the controller running\?\)", line)
        for line in check()
    )
    controller_wrote(old, now)
    assert f"{error}{copy} holds another config too: does the controller run on this one?)" in check()
    # a time limit too: each part that differs is named
    limited = tmp_path / "limited.yaml"
    limited.write_text(old.read_text() + "limits: {time_limit_s: 604800}\n")
    _install_plugin(limited, slurm, monkeypatch)
    assert any(
        ln.startswith(
            f"ERROR  {slurm}/job_submit.lua was written for another config (its VCs and time limit differ"
        )
        for ln in check()
    )
    (slurm / "job_submit.lua").unlink()
    assert f"WARN   job_submit.lua not checked: there is none in {slurm}" in check()


def test_bad_gpus_or_a_starved_vc_never_show_green() -> None:
    from hivebatch.reports.html import honest

    cards = [
        {"label": "Starved VCs", "value": "none", "detail": "", "cls": "ok"},
        {"label": "Idle VCs", "value": "none", "detail": "", "cls": "ok"},
    ]
    assert honest(cards, 0) == cards  # a healthy cluster keeps its green
    dead = honest(cards, 32)
    assert dead[0] == {
        "label": "Bad GPUs",
        "value": "32",
        "detail": "on DOWN/DRAIN nodes or marked bad",
        "cls": "bad",
    }
    assert [c["cls"] for c in dead] == ["bad", "", ""]
    starved = honest([{**cards[0], "value": "cv", "cls": "bad"}, cards[1]], 0)
    assert [c["cls"] for c in starved] == ["bad", ""]


def test_users_report_shows_the_strict_classes_against_the_limits(config: Path) -> None:
    assert "Strict classes" not in run("report", "users", *WINDOW)  # no limits: nothing to set use against
    config.write_text(
        config.read_text() + "user_limits:\n  urgent: {gpu_hours_per_week: 2, running_jobs: 1}\n"
        "  prior: {gpu_hours_per_week: 100}\n"
    )
    out = run("report", "users", *WINDOW)
    strict = out[out.index("Strict classes per user") :].splitlines()
    rows = [line.split() for line in strict[3:6]]
    # alice: j2 prior 4 GPUs × 2 h, j3 urgent 2 GPUs × 1 h; bob: j6 prior 8 GPUs from 8.5 h, still running
    assert rows == [
        ["alice", "cv", "urgent", "2.0", "/", "2.0", "0", "/", "1", "at", "limit:", "new", "jobs", "refused"],
        ["alice", "cv", "prior", "8.0", "/", "100.0", "0", "within"],
        ["bob", "nlp", "prior", "12.0", "/", "100.0", "1", "within"],
    ]
    data = json.loads(run("report", "users", *WINDOW, "--format", "json", "--vc", "nlp"))
    assert data["strict_classes"] == [
        {
            "user": "bob",
            "vc": "nlp",
            "class": "prior",
            "gpu_hours": 12.0,
            "gpu_hours_limit": 100.0,
            "holding_gpus": 1,
            "holding_gpus_limit": None,
            "over": None,
        }
    ]


def test_a_name_in_brackets_is_shown_as_it_is_on_a_terminal() -> None:
    # a user's or job's name is any text: "[/]" stopped the whole report with rich's MarkupError
    from hivebatch.reports.tables import TextTable, print_tables

    table = TextTable("GPU usage per user", ["USER", "JOB"], [["[/]", "[bold]x"]])
    table.styles[(0, 1)] = "red"
    out = io.StringIO()
    print_tables([table], out=out, terminal=True)
    assert "[/]" in out.getvalue() and "[bold]x" in out.getvalue()
