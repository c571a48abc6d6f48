"""`hivebatch simulate` end to end (no Slurm): JSON, tables, plots, trace replay, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hivebatch.cli.common import run_cli
from hivebatch.cli.hivebatch.main import cli

KEYS = {
    "policy",
    "mode",
    "jobs",
    "qos_rate",
    "makespan_s",
    "avg_jct_s",
    "avg_queue_s",
    "avg_norm_latency",
    "utilization",
    "vcs",
}


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = 0
    try:
        run_cli(cli, ["simulate", *args], prog_name="hivebatch")
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_paper_workload_json_all_policies_is_reproducible(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--workload", "paper", "--rate", "8", "--hours", "3", "--policy", "all", "--json"]
    code, out, _ = _run([*args, "--seed", "4"], capsys)
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["policy"] for r in rows] == [
        "qos",
        "fifo",
        "capacity",
        "minmin",
        "wfs",
        "tetris-perf",
        "tetris-cer",
        "qos-paper",
    ]
    for r in rows:
        assert set(r) >= KEYS and r["mode"] == "cells" and 0 <= r["qos_rate"] <= 1
        for e in r["vcs"].values():
            assert {"jobs", "avg_queue_s", "private_avg_queue_s", "excess_queue_s"} <= set(e)
            assert e["excess_queue_s"] == pytest.approx(e["avg_queue_s"] - e["private_avg_queue_s"], abs=1e-3)
    assert _run([*args, "--seed", "4"], capsys)[1] == out
    assert _run([*args, "--seed", "5"], capsys)[1] != out


def test_both_modes_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plots = tmp_path / "plots"
    code, out, err = _run(
        [
            "--workload",
            "paper",
            "--rate",
            "6",
            "--hours",
            "2",
            "--policy",
            "fifo",
            "--mode",
            "both",
            "--json",
            "--plot",
            str(plots),
        ],
        capsys,
    )
    assert code == 0
    assert [json.loads(line)["mode"] for line in out.splitlines()] == ["cells", "quota"]
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["completions-cdf.png", "excess-queue-fifo.png", "qos-makespan.png"]
    assert all((plots / n).read_bytes()[:4] == b"\x89PNG" for n in names)
    assert "wrote" in err


def test_plain_table_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["--workload", "paper", "--rate", "5", "--hours", "2", "--single-vc"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split("\t")[:4] == ["policy", "mode", "jobs", "QoS rate"]
    assert lines[1].startswith("qos\tcells\t")
    assert any(line.startswith("qos\tcells\tall\t") for line in lines)  # the single VC


def test_philly_replay_reports_skipped_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "p.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:00,600,8,4800,x\n"
        "2017-10-01 00:01:00,600,8,4800,x\n"
        "2017-10-01 00:02:00,300,16,4800,y\n"  # y has one node: too large
        "2017-10-01 00:03:00,300,1,300,nope\n"
    )
    vcs = tmp_path / "v.csv"
    vcs.write_text("vc,nodes\nx,1\ny,1\n")
    code, out, err = _run(
        ["--trace", str(trace), "--trace-format", "philly", "--vcs", str(vcs), "--mode", "both", "--json"],
        capsys,
    )
    assert code == 0
    assert (
        "2 of 4 trace jobs used" in err
        and "1 skipped: larger than its VC" in err
        and "1 skipped: VC not in the VC list" in err
    )
    cells = json.loads(out.splitlines()[0])
    assert cells["jobs"] == 2 and cells["vcs"]["x"]["avg_queue_s"] == 270.0  # second job waits 60 -> 600 s
    assert cells["makespan_s"] == 1200.0


def test_target_load_resizes_the_vcs_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a huge cluster, a small sample: x runs 1-GPU jobs, y 8-GPU jobs, arrivals over 56 minutes
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(12):
        rows.append(f"2017-10-01 00:{5 * i:02d}:00,1500,1,1500,x")
        rows.append(f"2017-10-01 00:{5 * i + 1:02d}:00,900,8,7200,y")
    trace = tmp_path / "p.csv"
    trace.write_text("\n".join(rows) + "\n")
    vcs = tmp_path / "v.csv"
    vcs.write_text("vc,nodes\nx,40\ny,40\n")
    args = ["--trace", str(trace), "--trace-format", "philly", "--vcs", str(vcs), "--mode", "both"]
    code, out, err = _run([*args, "--target-load", "0.6", "--json"], capsys)
    assert code == 0, err
    cells, quota = (json.loads(line) for line in out.splitlines())
    scaled = cells["scaled"]
    # last arrival 00:56 + 900 s (y) vs 00:55 + 1500 s (x): the span ends at 01:20
    assert scaled == quota["scaled"] and scaled["span_s"] == 80 * 60
    # x: 12 x 1500 GPU-s / 4800 s = 3.75 GPUs busy, / 0.6 = 6.25 GPUs -> 1 node; y: 18 / 0.6 -> 4 nodes
    assert (scaled["vcs"]["x"]["nodes_before"], scaled["vcs"]["x"]["nodes_after"]) == (40, 1)
    assert scaled["vcs"]["y"]["nodes_after"] == 4
    assert scaled["vcs"]["y"]["load_after"] == pytest.approx(12 * 7200 / (4800 * 32), abs=1e-6)
    assert cells["vcs"]["y"]["excess_queue_s"] == 0.0 and cells["vcs"]["x"]["excess_queue_s"] == 0.0
    code, out, _ = _run([*args, "--target-load", "0.6"], capsys)
    assert out.startswith("scaled: VC sizes fitted to each VC's demand for load 60%")
    assert "x 40->1" in out.splitlines()[0]
    code, _, err = _run(["--workload", "paper", "--target-load", "0.6"], capsys)
    assert code != 0 and "--target-load needs --vcs FILE" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--trace", "no-such-file.csv", "--trace-format", "philly", "--vcs", "no-such-vcs.csv"],
            "cannot read",
        ),
        (["--trace", "x.csv"], "--trace-format"),
        (["--workload", "paper", "--trace", "x.csv"], "either --workload"),
        ([], "either --workload"),
        (["--workload", "paper", "--rate", "0"], "--rate and --hours must be > 0"),
        (["--workload", "paper", "--bad-node", "node1"], "NODE:START_S"),
        (["--workload", "paper", "--bad-node", "zz:0:10"], "no node 'zz'"),
        (["--workload", "paper", "--opportunistic", "2"], "between 0 and 1"),
        (["--workload", "paper", "--policy", "nope"], "nope"),
    ],
)
def test_bad_input_is_one_clear_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(args, capsys)
    assert code != 0 and out == ""
    assert message in err and "Traceback" not in err


def test_policy_choices_match_the_policies_the_qos_core_offers() -> None:
    from hivebatch.cli.hivebatch.simulate import POLICY_CHOICES
    from hivebatch.qos import POLICY_NAMES

    assert set(POLICY_CHOICES) == {*POLICY_NAMES, "all"}


def test_sharing_workload_compares_exclusive_binpack_and_colocate(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["--workload", "sharing", "--hours", "6", "--seed", "1", "--json"], capsys)
    assert code == 0
    rows = {r["mode"]: r for r in (json.loads(line) for line in out.splitlines())}
    assert list(rows) == ["exclusive", "binpack", "colocate"]
    assert rows["exclusive"]["submitted"] == rows["binpack"]["submitted"] == rows["colocate"]["submitted"]
    # slices share GPUs: the same guaranteed work holds fewer GPUs than when each slice takes a whole one
    assert rows["binpack"]["held_pct"] < rows["exclusive"]["held_pct"]
    assert rows["exclusive"]["colocated_gpu_h"] == 0 == rows["binpack"]["colocated_gpu_h"]
    assert rows["colocate"]["colocated_gpu_h"] > 0


def test_a_sites_own_history_replays_on_the_sites_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "sacct-lab.txt"
    monkeypatch.chdir(tmp_path)  # no etc/hivebatch.yaml here
    monkeypatch.delenv("HIVEBATCH_CONFIG", raising=False)
    code, _, err = _run(["--trace", str(trace), "--trace-format", "sacct"], capsys)
    assert code != 0 and "needs --config FILE or --vcs FILE" in err
    example = Path(__file__).resolve().parents[2] / "etc" / "hivebatch.example.yaml"
    monkeypatch.setenv("HIVEBATCH_CONFIG", str(example))
    code, out, err = _run(["--trace", str(trace), "--trace-format", "sacct", "--json"], capsys)
    assert code == 0, err
    assert set(json.loads(out.splitlines()[0])["vcs"]) == {"cv", "nlp", "sys"}
