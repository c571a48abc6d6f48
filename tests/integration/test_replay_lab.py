"""docs/simulate.md's lab commands: the lab's own sacct history replayed in the simulator, and hivebatch replay
of two tiny slices in both modes (every job run, a row per VC, accounts restored; on the second, the sharing
anomaly under plain Slurm and none through hivebatch, and the hivebatch run's ledger, kept with --keep,
read by hadmin events)."""

from __future__ import annotations

import re
import subprocess
from typing import Any

from lab_site import lab_site, play_page


def _associations() -> str:
    done = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "assoc", "format=Account,User,GrpTRES"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout


def test_replay_runs_every_job_in_both_modes(slurm_lab: Any) -> None:
    before = _associations()
    with lab_site(slurm_lab) as site:
        # the page's `$` commands (the simulator) run offline, in tests/unit/test_docs.py
        printed = play_page(site, "simulate.md", plain=None)
    replays = {command.split("--trace ")[1].split()[0]: out for command, out in printed.items()
               if command.startswith("hivebatch replay") and "--alone" not in command}  # fmt: skip
    assert set(replays) == {"slice.csv", "anomaly.csv"}
    # cv's jobs of the anomaly slice alone: only they ran (sacct), and cv alone waits as it does beside
    # the others: the cells make sharing cost it nothing. Where the controller's cycles fall moves cv's
    # mean wait by as much as the simulator's range over cycle phases (0.7 trace min here: one phase sees
    # both 5-GPU jobs in one cycle, another preempts the first for the second), and each live run's
    # starts add up to one interval (0.5) beyond it (CI runs: +0.6 beside, -0.2 alone; -0.4 beside,
    # +0.8 alone). Sharing's own cost would be one of cv's three jobs behind a 10-minute job: +3.3
    alone = next(out for command, out in printed.items() if "--alone cv" in command)
    assert any(line.startswith("hivebatch\tslurm\t3/3\t") for line in alone), alone
    (only,) = _vc_rows(alone)
    assert only[0] == "cv", alone
    shared_cv = _excess(replays["anomaly.csv"])["cv"]["hivebatch"]
    low, high = _phase_range(alone)
    assert abs(shared_cv - float(only[2])) <= (high - low) + 2 * 0.5, (replays["anomaly.csv"], alone)
    for replay in replays.values():
        jobs = next(int(line.split()[0]) for line in replay if " jobs over " in line)
        for mode in ("plain", "hivebatch"):
            done = [line for line in replay if line.startswith(f"{mode}\tslurm\t")]
            assert done and done[0].split("\t")[2] == f"{jobs}/{jobs}", replay  # every job ran, from sacct
        assert set(_excess(replay)) == {"cv", "nlp", "sys"}, replay
    # Slurm's own placement fragments the nodes nlp's 2-node job needs although its GrpTRES has room;
    # the cells keep them whole (the simulator predicts +9.7 and +0.0 trace min; one interval is 0.5)
    nlp = _excess(replays["anomaly.csv"])["nlp"]
    assert nlp["plain"] >= 5.0 and nlp["hivebatch"] <= 1.0, replays["anomaly.csv"]
    # plain mode's temporary accounts and the Operator's associations with them are gone
    assert _associations() == before
    assert "hbreplay_" not in before


def _vc_rows(replay: list[str]) -> list[list[str]]:
    """The replay's per-VC table, without its header."""
    header = next(i for i, line in enumerate(replay) if line.startswith("VC\t"))
    return [line.split("\t") for line in replay[header + 1 : replay.index("", header)]]


def _phase_range(replay: list[str]) -> tuple[float, float]:
    """The simulator's lowest and highest mean wait over cycle phases (trace minutes), as the replay prints them."""
    line = next(line for line in replay if "\tsim over cycle phases\t" in line)
    match = re.search(r", ([0-9.]+) to ([0-9.]+) over ", line)
    assert match, line
    return float(match[1]), float(match[2])


def _excess(replay: list[str]) -> dict[str, dict[str, float]]:
    """VC -> Slurm's excess wait per mode, trace minutes, from the replay's per-VC table."""
    return {r[0]: {"plain": float(r[2]), "hivebatch": float(r[4])} for r in _vc_rows(replay)}
