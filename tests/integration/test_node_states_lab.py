"""Nodes that take no new work, reservations, and a pin Slurm does not start, on the real lab
(issue: Slurm's job semantics)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
from lab_controller import Ctl
from lab_users import run_as
from sqlalchemy import select

from hivebatch.db import Event

pytestmark = [pytest.mark.integration, pytest.mark.parametrize("ctl", ["sqlite"], indirect=True)]


@contextmanager
def reservation(*spec: str) -> Iterator[str]:
    name = f"hb{uuid.uuid4().hex[:6]}"
    subprocess.run(["scontrol", "create", "reservation", f"reservationname={name}", *spec],
                   check=True, capture_output=True, text=True)  # fmt: skip
    try:
        yield name
    finally:
        subprocess.run(["scontrol", "delete", f"ReservationName={name}"], capture_output=True, check=False)


def _events(ctl: Ctl, kind: str) -> list[Event]:
    with ctl.factory() as s:
        return list(s.scalars(select(Event).where(Event.kind == kind)))


def test_a_maintenance_reservation_takes_its_node_out_of_the_cells_until_it_ends(ctl: Ctl) -> None:
    with reservation("starttime=now", "duration=30", "nodes=node4", "flags=maint", "users=alice") as name:
        ctl.until(lambda: "node4" in {n.name for n in ctl.backend.list_nodes() if n.bad},
                  what="Slurm shows node4 in maintenance")  # fmt: skip
        ids = [ctl.submit("bob", "nlp", 8), ctl.submit("alice", "cv", 8)]
        ctl.cycle()
        used = {n for jid in ids for n in (ctl.job(jid).placement or {})}
        assert used and "node4" not in used
        assert "node4" in {e.data["node"] for e in _events(ctl, "node_bad")}
        # a GPU job in the reservation is Slurm's to place there: it is not held, and runs on node4
        out = run_as("alice", ["sbatch", "--parsable", "-J", f"{ctl.tag}-resv", f"--reservation={name}",
                               "--gres=gpu:1", "-t", "2", "-o", "/dev/null", "--wrap", "sleep 3"])  # fmt: skip
        assert out.returncode == 0, out.stderr
        inside = int(out.stdout.strip())
        ctl.mine.add(inside)
        job = ctl.lab.wait_for(inside, {"RUNNING", "COMPLETED"}, timeout_s=60)
        assert job.nodes == ["node4"] and not job.admin_comment
        ctl.lab.wait_for(inside, {"COMPLETED"}, timeout_s=60)  # Slurm keeps a reservation with running jobs
    ctl.until(lambda: "node4" not in {n.name for n in ctl.backend.list_nodes() if n.bad}, what="node4 back")
    ctl.cycle()
    assert "node4" in {e.data["node"] for e in _events(ctl, "node_healthy")}


def test_a_pin_slurm_does_not_start_is_taken_back_and_placed_elsewhere(ctl: Ctl) -> None:
    ctl.ctx.settings = replace(ctl.ctx.settings, start_timeout_s=4.0)
    # a maintenance window that opens in 5 minutes on three nodes: Slurm will not start a 10-minute
    # job there, and nothing about it shows on the nodes yet
    with reservation("starttime=now+300", "duration=30", "nodes=node[1-3]", "flags=maint", "users=root"):
        jid = ctl.submit("alice", "cv", 1)
        ctl.cycle()
        first = ctl.job(jid).placement
        # the cells fill the cluster in tree order: on the idle lab the first pin is on node1
        assert first and next(iter(first)) != "node4", ctl.job(jid).reason
        ctl.until(lambda: ctl.job(jid).state == "running", timeout_s=90,
                  what=lambda: f"{ctl.job(jid).state} {ctl.job(jid).reason}")  # fmt: skip
        ((node, idx),) = ctl.job(jid).placement.items()
        assert node == "node4" and idx == next(iter(first.values()))  # same GPU index, gres never re-typed
        backs = [e for e in _events(ctl, "taken_back") if e.slurm_job_id == jid]
        assert backs and "Slurm did not start it within 4 s" in backs[0].message
