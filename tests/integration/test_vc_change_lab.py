"""An admin moves cells from one VC to another while both run jobs: the next controller run follows the
new config on the lab's real Slurm, with the ledger on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
import yaml
from lab_controller import Ctl
from sqlalchemy import select

from hivebatch.controller.context import load_context
from hivebatch.db import VirtualCluster
from hivebatch.slurm.types import SlurmError

pytestmark = pytest.mark.integration


def _layout(ctl: Ctl, cv: dict[str, int], sys: dict[str, int] | None) -> None:
    """Three of the lab's four nodes, so that the cells a VC gains can only come from the other VC's;
    ``sys`` None takes sys out of the config."""
    data = yaml.safe_load(ctl.config.read_text())
    data["cluster"]["physical_cells"] = [
        c for c in data["cluster"]["physical_cells"] if c["nodes"] != ["node4"]
    ]
    data["virtual_clusters"]["cv"] = {"cells": cv}
    if sys is None:
        del data["virtual_clusters"]["sys"]
    else:
        data["virtual_clusters"]["sys"] = {"cells": sys}
    ctl.config.write_text(yaml.safe_dump(data))
    ctl.ctx = load_context(ctl.config, publish=True)


def test_cells_moved_to_another_vc_take_over_a_running_job_beyond_its_vcs_cells(ctl: Ctl) -> None:
    _layout(ctl, cv={"V100-NODE": 1, "V100-SOCKET": 1}, sys={"V100-SWITCH": 1, "V100": 2})
    cv8, cv4 = ctl.submit("alice", "cv", 8, sleep=300), ctl.submit("alice", "cv", 4, sleep=300)
    sys_running = ctl.submit("carol", "sys", 2, sleep=300)
    ctl.until(
        lambda: all(ctl.job(j).state == "running" for j in (cv8, cv4, sys_running)), what="cv and sys run"
    )
    sys_waiting = ctl.submit("carol", "sys", 2, sleep=300)
    ctl.cycle()
    assert ctl.job(sys_waiting).state == "queued"  # sys's one switch is taken
    four = "virtual cluster sys's cells hold at most 2 GPUs on one node, and the job asks for 4 there"
    with pytest.raises(SlurmError, match=four):
        ctl.submit("carol", "sys", 4, extra=["--hold"])

    # cv's socket goes to sys
    _layout(ctl, cv={"V100-NODE": 1}, sys={"V100-SOCKET": 1, "V100-SWITCH": 1, "V100": 2})
    ctl.cycle()
    with ctl.factory() as s:
        cells = {v.name: {c.cell_type: c.count for c in v.cells} for v in s.scalars(select(VirtualCluster))}
    assert cells["cv"] == {"V100-NODE": 1}
    assert cells["sys"] == {"V100": 2, "V100-SOCKET": 1, "V100-SWITCH": 1}
    # slurmctld's plugin was written for the old VCs: it takes the copy the controller's cycle wrote
    held = ctl.submit("carol", "sys", 4, extra=["--hold"])
    ctl.lab.backend("carol").cancel(held)
    with pytest.raises(SlurmError, match="virtual cluster cv has 8"):
        ctl.submit("alice", "cv", 12, extra=["--hold"])
    (beyond,) = ctl.events(cv4, "beyond_cells")
    assert beyond.startswith("holds GPUs beyond VC cv's cells")
    assert ctl.events(cv8, "beyond_cells") == []
    # sys's waiting job takes the socket the 4-GPU job holds, after its notice; the job waits for cv's cells
    ctl.until(
        lambda: ctl.job(sys_waiting).state == "running",
        timeout_s=60,
        what=lambda: ctl.job(sys_waiting).reason,
    )
    assert ctl.job(cv4).state == "preempted" and ctl.job(cv4).preemptions == 1
    held = ctl.lab.wait_for(cv4, {"PENDING"}, held=True, timeout_s=20)
    assert held.reason == "job_requeued_in_held_state"
    assert set(ctl.job(sys_waiting).placement or {}) <= set(ctl.job(cv4).placement or {})
    assert ctl.job(cv8).state == "running" and ctl.job(sys_running).state == "running"


def test_a_removed_vcs_running_job_leaves_when_the_vc_given_its_cells_needs_them(ctl: Ctl) -> None:
    _layout(ctl, cv={"V100-NODE": 1, "V100-SOCKET": 1}, sys={"V100-SWITCH": 1, "V100": 2})
    cv8, cv4 = ctl.submit("alice", "cv", 8, sleep=300), ctl.submit("alice", "cv", 4, sleep=300)
    carol = ctl.submit("carol", "sys", 2, sleep=300)
    ctl.until(lambda: all(ctl.job(j).state == "running" for j in (cv8, cv4, carol)), what="cv and sys run")

    # sys's cells go to cv: carol's job runs on as opportunistic work until cv needs its GPUs
    _layout(ctl, cv={"V100-NODE": 1, "V100-SOCKET": 1, "V100-SWITCH": 1, "V100": 2}, sys=None)
    ctl.cycle()
    assert ctl.job(carol).state == "running"
    (kept,) = ctl.events(carol, "beyond_cells")
    assert kept.startswith("holds GPUs of VC sys, which the config no longer has")
    cv = [ctl.submit("alice", "cv", 2, sleep=300), ctl.submit("alice", "cv", 1, sleep=300),
          ctl.submit("alice", "cv", 1, sleep=300)]  # fmt: skip
    ctl.until(
        lambda: all(ctl.job(j).state == "running" for j in cv),
        timeout_s=60,
        what=lambda: [ctl.job(j).reason for j in cv],
    )
    held = ctl.lab.wait_for(carol, {"PENDING"}, held=True, timeout_s=20)
    assert held.reason == "job_requeued_in_held_state"
    ctl.cycle()
    left = ctl.job(carol)
    assert left.preemptions == 1 and left.state == "rejected"
    assert left.reason.startswith("unknown VC 'sys': the config has cv, nlp")
