"""The docs pages that need a cluster, on the lab: every command a page shows runs as the user its prompt names
and prints what the page shows (numbers and column widths left open)."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_limits import limited_plugin, write_usage_from_a_ledger
from lab_site import PROJECT, Site, cancel, lab_site, page_dir, play_page


@pytest.fixture(scope="module")
def site(slurm_lab) -> Iterator[Site]:  # type: ignore[no-untyped-def]
    with lab_site(slurm_lab) as private:
        yield private


def test_the_hsub_page_commands_run_as_shown(site: Site) -> None:
    site.controller_once()  # the page's --test-only answer comes from the controller's last cycle
    play_page(site, "hsub.md")


def test_the_hq_page_commands_run_as_shown(site: Site) -> None:
    workdir = page_dir(site)
    # the page's cluster: alice's resnet (prior, 4 GPUs, with its model), bob's 2 x 2 allreduce and
    # carol's opportunistic 6-GPU job, all placed by the controller and running
    (workdir / "train.sh").write_text(
        "#!/bin/bash\n#SBATCH -J resnet\n#SBATCH -t 30\n#HSUB --model resnet50 --batch-size 256 --iters 300\nsleep 300\n"
    )
    (workdir / "long.sh").write_text("#!/bin/bash\nsleep 300\n")
    jobs = [
        site.as_user("alice", "hsub", "-A", "cv", "-q", "prior", "--gpus", "4", "train.sh", cwd=workdir),
        site.as_user("bob", "hsub", "-A", "nlp", "-N", "2", "--gpus-per-node", "2", "-J", "allreduce", "-t", "60",
                     "long.sh", cwd=workdir),
        site.as_user("carol", "hsub", "-A", "sys", "-q", "opportunistic", "--gpus", "6", "-J", "borrow", "-t", "60",
                     "long.sh", cwd=workdir),
    ]  # fmt: skip
    submitted = [p.stdout.split()[-1] for p in jobs if p.returncode == 0]
    try:
        assert len(submitted) == 3, [p.stderr for p in jobs]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            site.controller_once()
            states = subprocess.run(["squeue", "-h", "-o", "%T", "-j", ",".join(submitted)], capture_output=True,
                                    text=True, check=False).stdout.split()  # fmt: skip
            if states == ["RUNNING"] * 3:
                break
            time.sleep(1)
        site.controller_once()  # the ledger sees them running
        play_page(site, "hq.md", workdir=workdir)
    finally:
        cancel(submitted)


def _page_section(page: Path, section: str) -> dict[str, Any]:
    """The config section the page says its lab commands run with: its yaml block that holds only that section."""
    for block in re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
        data = yaml.safe_load(block)
        if set(data) == {section}:
            return dict(data[section])
    raise AssertionError(f"{page.name} shows no yaml block with only a {section}: section")


def test_the_sharing_page_commands_run_as_shown(slurm_lab) -> None:  # type: ignore[no-untyped-def]
    page = PROJECT / "docs" / "sharing.md"
    with lab_site(slurm_lab, sharing=_page_section(page, "sharing")) as site:
        play_page(site, page.name)


def test_the_enforcement_page_commands_run_as_shown(slurm_lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page = PROJECT / "docs" / "enforcement.md"
    limits = _page_section(page, "user_limits")
    # the controller runs on the limits too: the plugin takes them from its copy of the VCs while fresh
    with lab_site(slurm_lab, user_limits=limits) as site, limited_plugin(slurm_lab, limits) as usage:
        site.controller_once()  # writes the node sizes the plugin refuses the page's -c 32 job by
        write_usage_from_a_ledger(usage, tmp_path)  # the 52 GPU-hours the page says alice used
        play_page(site, page.name)


def test_the_controller_page_commands_run_as_shown(slurm_lab) -> None:  # type: ignore[no-untyped-def]
    with lab_site(slurm_lab) as site:
        workdir = page_dir(site)
        try:  # the page's `$` commands (the database) run offline, in tests/unit/test_docs.py
            play_page(site, "controller.md", plain=None, workdir=workdir)
        finally:
            loop = workdir / "controller.pid"
            if loop.exists():  # the page's own `kill` did not run
                subprocess.run(["kill", loop.read_text().strip()], capture_output=True, check=False)


def test_the_hadmin_page_lab_commands_run_as_shown(slurm_lab) -> None:  # type: ignore[no-untyped-def]
    with lab_site(
        slurm_lab
    ) as site:  # the page's `$` commands read the example ledger, in tests/unit/test_docs.py
        play_page(site, "hadmin.md", plain=None)


def test_the_qos_page_lab_commands_run_as_shown(slurm_lab) -> None:  # type: ignore[no-untyped-def]
    with lab_site(
        slurm_lab
    ) as site:  # the page's `$` commands (model fit, predict) run in tests/unit/test_docs.py
        play_page(site, "qos.md", plain=None)


def test_the_lab_page_commands_run_as_shown(slurm_lab) -> None:  # type: ignore[no-untyped-def]
    with lab_site(slurm_lab) as site:
        play_page(site, "lab.md", plain=None)


def test_the_quickstart_page_commands_run_as_shown(slurm_lab) -> None:  # type: ignore[no-untyped-def]
    with lab_site(slurm_lab) as site:  # the quickstart uses the lab's own config; the site only hosts the run
        play_page(site, "quickstart.md", plain=None)
    # its users ran hsub and hq with no HIVEBATCH_CONFIG: the lab's config is where a site's clients look
    assert Path("/etc/hivebatch/hivebatch.yaml").resolve() == (slurm_lab.dir / "hivebatch.yaml").resolve()
