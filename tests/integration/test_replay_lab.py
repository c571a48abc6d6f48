"""docs/simulate.md's lab commands: the lab's own sacct history replayed in the simulator, and hivebatch replay
of a tiny slice in both modes (every job run, a row per VC, accounts restored)."""

from __future__ import annotations

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
    (replay,) = [out for command, out in printed.items() if command.startswith("hivebatch replay")]
    jobs = next(int(line.split()[0]) for line in replay if " jobs over " in line)
    for mode in ("plain", "hivebatch"):
        done = [line for line in replay if line.startswith(f"{mode}\tslurm\t")]
        assert done and done[0].split("\t")[2] == f"{jobs}/{jobs}", replay  # every job ran, from sacct
    header = next(i for i, line in enumerate(replay) if line.startswith("VC\t"))
    per_vc = {line.split("\t")[0] for line in replay[header + 1 : replay.index("", header)]}
    assert per_vc == {"cv", "nlp", "sys"}, replay
    # plain mode's temporary accounts and the Operator's associations with them are gone
    assert _associations() == before
    assert "hbreplay_" not in before
