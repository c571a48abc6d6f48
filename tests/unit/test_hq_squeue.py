"""hq reads squeue's options as squeue does and fills hivebatch's columns into squeue's own output.

tests/fixtures/squeue/marked.json holds what the real squeue printed on the lab for the marked formats
(three jobs of alice: a held array 156_[1-3], held 154, running 155); the lab test compares hq with
squeue byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hivebatch.cli.hq.squeue import HB_FIELDS, env_words, fill_markers, hb_fields_in, marked_format, read_args

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "squeue" / "marked.json").read_text()
)
VALUES = {
    156: {"vc": "cv", "slack": "+5m"},
    154: {"vc": "nlp", "slack": "-"},
    155: {"vc": "cv", "placement": "node1:[0]"},
}


def value(field: str, job_id: int) -> str:
    return VALUES[job_id].get(field, "")


@pytest.mark.parametrize("flag", ["o", "O"])
def test_marked_format_is_what_was_recorded(flag: str) -> None:
    case = RECORDED[flag]
    assert marked_format(flag, case["format"])[0] == case["marked"]


def filled(flag: str) -> list[str]:
    case = RECORDED[flag]
    _, cols = marked_format(flag, case["format"])
    return fill_markers(case["squeue_stdout"], cols, value).splitlines()


def test_percent_format_filled_in_squeue_output() -> None:
    lines = filled("o")
    assert lines[0] == "             JOBID     USER VC      SLACK WHY|"
    assert lines[1] == "         156_[1-3]    alice cv        +5m |"
    assert lines[2] == "               154    alice nlp          - |"


def test_long_format_keeps_squeue_columns_and_widths() -> None:
    lines = filled("O")
    assert lines[0] == "JOBID     VC    USER                   PLACEMENT|PARTITION           "
    assert lines[3] == "155       cv    alice                  node1:[0]|gpu                 "


def test_squeue_options_read_as_squeue_reads_them() -> None:
    args = read_args(["-p", "gpu", "--Form=JobID,VC", "-u", "alice", "-j", "2_39", "--json", "--star"])
    assert args.problems == []
    assert args.format == ("O", "JobID,VC")
    assert args.own == {"json": True}
    assert args.squeue == ["-p", "gpu", "--Form=JobID,VC", "-u", "alice", "-j", "2_39", "--star"]
    assert args.words == ["2_39"]
    assert read_args(["--s"]).problems == [
        "option '--s' is ambiguous; possibilities: '--sib' '--sibling' '--sort' '--start' '--steps' '--states'"
    ]


def test_only_hivebatch_fields_need_hq() -> None:
    assert not hb_fields_in("o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R")
    assert hb_fields_in("o", "%i %.8{slack}") and hb_fields_in("O", "JobID,placement:20")
    assert set(HB_FIELDS) >= {"vc", "class", "placement", "predictedstart", "predictedend", "slack", "why"}


def test_a_first_column_that_fills_its_width_keeps_its_text() -> None:
    # squeue prints `%.10i` of a pending array as exactly "1202_[1-3]": no leading blank before the marker
    text, cols = marked_format("o", "%.10i|%{vc}|%.8u")
    line = "1202_[1-3]|\x011202\x020\x03|   alice"
    assert fill_markers(line, cols, lambda field, job: f"{field}{job}") == "1202_[1-3]|vc1202|   alice"


def test_hq_start_is_squeue_start_with_hivebatchs_start_times_order_and_reasons(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # recorded on the lab (tests/fixtures/squeue/start_held.json): squeue --start showed N/A and
    # (JobHeldUser) for every job the plugin holds, so a student's `squeue --start` habit told nothing
    import datetime as dt
    import time

    from hivebatch.cli.hq import main as hq_cli
    from hivebatch.cli.hq.rows import JobRow

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    rows = [
        JobRow(job_id=2031, state="PENDING", predicted_start=dt.datetime(2026, 11, 30, 11, 44, 16),
               reason="reserved: starts by 2026-11-30T11:44:16 on node1[0,1,2,3]"),
        JobRow(job_id=2032, state="PENDING", slurm_expected_start=dt.datetime(2026, 11, 30, 12, 24, 15),
               reason="waits for its begin time 2026-11-30 12:24 UTC; it holds no GPUs meanwhile"),
        JobRow(job_id=2033, state="PENDING", reason="held by its owner: scontrol release 2033 lets hivebatch place it"),
    ]  # fmt: skip
    start, asked = _recorded_squeue(monkeypatch, "start_held", "o", rows)
    monkeypatch.setattr(hq_cli, "_now", lambda: dt.datetime(2026, 11, 30, 11, 24, 30))
    assert hq_cli.run(["--start", "-u", "alice"]) == 0
    assert asked == [["--start", "-u", "alice", "-o", start["marked"]]]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == start["plain_squeue_start"].splitlines()[0]  # squeue's own header
    assert [line.split()[0] for line in lines[1:]] == ["2031", "2032", "2033"]  # by predicted start
    assert lines[1].split()[5:7] == ["2026-11-30T11:44:16", "1"]
    assert lines[1].endswith("(reserved: starts by 2026-11-30T11:44:16 on node1[0,1,2,3])")
    assert lines[2].split()[5] == "2026-11-30T12:24:15"  # the begin time, as squeue shows it
    assert lines[3].split()[5] == "N/A"
    assert lines[3].endswith("(held by its owner: scontrol release 2033 lets hivebatch place it)")
    # each line keeps squeue's layout: the same columns as the plain squeue --start line
    plain = {line.split()[0]: line for line in start["plain_squeue_start"].splitlines()[1:]}
    assert lines[2][: plain["2032"].index("(")] == plain["2032"][: plain["2032"].index("(")]


def test_hq_long_is_squeue_long_with_hivebatchs_reasons(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # recorded on the lab (tests/fixtures/squeue/long_held.json): squeue -l showed (JobHeldUser) for
    # every GPU job waiting in the plugin's hold; hq -l keeps every other byte of squeue -l
    from hivebatch.cli.hq import main as hq_cli
    from hivebatch.cli.hq.rows import JobRow

    held, reserved = (
        "held by its owner: scontrol release 2046 lets hivebatch place it",
        "reserved: starts by 11:53",
    )
    rows = [
        JobRow(job_id=2049, state="PENDING", hivebatch=False, slurm_reason="Resources", reason="waiting for resources"),
        JobRow(job_id=2046, state="PENDING", reason=held, slurm_reason="JobHeldUser"),
        JobRow(job_id=2045, state="PENDING", reason=reserved, slurm_reason="JobHeldUser"),
        JobRow(job_id=2048, state="RUNNING", hivebatch=False, nodes=["node1", "node2"]),
        *(JobRow(job_id=j, state="RUNNING", nodes=[n], placement={n: [0]})
          for j, n in ((2042, "node1"), (2043, "node2"), (2044, "node2"))),
        JobRow(job_id=2047, state="RUNNING", nodes=["node3", "node4"]),
    ]  # fmt: skip
    long, asked = _recorded_squeue(monkeypatch, "long_held", "O", rows)
    assert hq_cli.run(["-l"]) == 0
    assert asked == [["-l", "-O", long["marked"]]]
    plain = long["plain_squeue_long"].replace("(JobHeldUser)", "\x00", 2)
    expected = plain.replace("\x00", f"({held})", 1).replace("\x00", f"({reserved})", 1)
    assert capsys.readouterr().out == expected


def test_a_jobs_nodes_are_compressed_as_slurm_prints_them() -> None:
    from hivebatch.slurm.parse import compress_hostlist

    # scontrol show hostlist on the lab, for each list
    shown = {
        "node1,node2": "node[1-2]",
        "node1,node2,node4": "node[1-2,4]",
        "gpu01,gpu02,gpu04,gpu10": "gpu[01-02,04,10]",
        "a1,b1,b2": "a1,b[1-2]",
        "login,node3": "login,node3",
        "node9,node10,node11": "node[9-11]",
        "node009,node010": "node[009-010]",
        "node1": "node1",
    }
    assert {names: compress_hostlist(names.split(",")) for names in shown} == shown


def _recorded_squeue(
    monkeypatch: pytest.MonkeyPatch, name: str, flag: str, rows: list[Any]
) -> tuple[dict[str, str], list[list[str]]]:
    """hq on a recorded squeue output (tests/fixtures/squeue/NAME.json) and ``rows`` as its rows: the
    recording, and the arguments hq gave squeue."""
    import hivebatch.cli.hq.squeue as hq_squeue
    from hivebatch.cli.hq import main as hq_cli

    recorded = json.loads(
        (Path(__file__).resolve().parents[1] / "fixtures" / "squeue" / f"{name}.json").read_text()
    )
    assert marked_format(flag, recorded["format"], recorded.get("tag", ""))[0] == recorded["marked"]
    monkeypatch.setattr(hq_squeue, "new_tag", lambda: recorded.get("tag", ""))
    asked: list[list[str]] = []
    monkeypatch.setattr(
        hq_squeue, "run_squeue", lambda args: asked.append(list(args)) or recorded["squeue_stdout"]
    )
    monkeypatch.setattr(hq_cli, "_rows", lambda args, ids: [r for r in rows if r.job_id in ids])
    return recorded, asked


def test_hq_long_iterating_prints_squeues_date_line_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # seen on the lab: hq -l -i 2 printed the date twice, its own above squeue -l's
    import time

    from hivebatch.cli.hq import main as hq_cli

    long, _asked = _recorded_squeue(monkeypatch, "long_held", "O", [])

    def stop(_s: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", stop)
    with pytest.raises(KeyboardInterrupt):
        hq_cli.run(["-l", "-i", "5"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == long["plain_squeue_long"].splitlines()[0] and out[1].split()[0] == "JOBID"


def test_hq_start_keeps_a_name_with_a_line_break_or_markers_with_its_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # recorded on the lab (tests/fixtures/squeue/start_names.json): job 754 is named "two\nlines", and
    # job 755 is named with the characters of job 753's marker in an untagged format
    import datetime as dt

    from hivebatch.cli.hq import main as hq_cli
    from hivebatch.cli.hq.rows import JobRow

    at = {753: dt.datetime(2026, 11, 30, 12, 0), 754: dt.datetime(2026, 11, 30, 11, 0), 755: dt.datetime(2026, 11, 30, 11, 30)}  # fmt: skip
    rows = [JobRow(job_id=j, state="PENDING", predicted_start=t, reason=f"waits {j}") for j, t in at.items()]
    start, asked = _recorded_squeue(monkeypatch, "start_names", "o", rows)
    monkeypatch.setattr(hq_cli, "_now", lambda: dt.datetime(2026, 11, 30, 10, 0))
    assert hq_cli.run(["--start", "-u", "alice"]) == 0
    assert asked == [["--start", "-u", "alice", "-o", start["marked"]]]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == start["plain_squeue_start"].splitlines()[0]
    # by predicted start, the name's two lines together: 754 (11:00), 755 (11:30), 753 (12:00)
    assert lines[1].split()[:3] == ["754", "gpu", "two"]
    assert lines[2].split()[0] == "line" and lines[2].endswith("(waits 754)")
    assert (
        lines[3].split()[0] == "755" and "\x01753\x020\x03" in lines[3] and lines[3].endswith("(waits 755)")
    )
    assert lines[4].split()[0] == "753" and lines[4].endswith("(waits 753)")
    assert len(lines) == 5 and not any("\x1e" in line or "hb0123456789ab" in line for line in lines)


def test_squeues_variables_are_read_as_the_options_they_stand_for() -> None:
    # tests/fixtures/squeue/env_selection.txt: squeue selects and sorts by them; hq listed every job
    env = {"SQUEUE_USERS": "bob", "SQUEUE_STATES": "PD", "SQUEUE_SORT": "-i", "SQUEUE_ALL": "", "HOME": "/h",
           "SQUEUE_SIB": "1", "SQUEUE_SIBLING": "1", "SQUEUE_FORMAT": "%i"}  # fmt: skip
    words = env_words(env, [])
    assert words == ["-a", "--sibling", "-S", "-i", "-t", "PD", "-u", "bob"]
    # given before the command line's options, which win, as in squeue
    args = read_args([*words, "-u", "alice"])
    assert args.options["user"] == "alice" and args.options["sort"] == "-i" and args.format is None
    # squeue reads SQUEUE_LICENSES only when the command line names no partition
    assert env_words({"SQUEUE_LICENSES": "x"}, []) == ["-L", "x"]
    assert env_words({"SQUEUE_LICENSES": "x"}, ["-p", "gpu"]) == []
