"""Untyped pins on the real lab: a job placed on exactly the GPUs Slurm sees free on a node is pinned as
a plain count; requeued, it resumes on other GPU indices of another node, where Slurm has no choice."""

from __future__ import annotations

import subprocess

import pytest
from lab_controller import Ctl

pytestmark = [pytest.mark.integration, pytest.mark.parametrize("ctl", ["sqlite"], indirect=True)]


def _running(ctl: Ctl, *ids: int) -> None:
    ctl.until(
        lambda: all(ctl.job(j).state == "running" for j in ids),
        what=lambda: {j: (ctl.job(j).state, ctl.job(j).reason) for j in ids},
    )


def _gpus_of(ctl: Ctl, jid: int) -> dict[str, list[int]]:
    return ctl.lab.backend(ctl.lab.operator).job_gpus(jid)


def test_an_untyped_job_requeued_resumes_on_other_indices_of_another_node(ctl: Ctl) -> None:
    first = ctl.submit("carol", "sys", 2, qos="opportunistic", sleep=300)
    _running(ctl, first)
    wide = ctl.submit("carol", "sys", 6, qos="opportunistic", sleep=300)
    _running(ctl, wide)
    (home,) = ctl.job(wide).placement
    assert list(ctl.job(first).placement) == [home]
    subprocess.run(["scancel", str(first)], check=True, timeout=30)
    ctl.until(lambda: ctl.job(first).state != "running", what="the first job to end")
    ctl.lab.wait_for(first, {"CANCELLED", "COMPLETED"}, timeout_s=30)
    small = ctl.submit("carol", "sys", 2, qos="opportunistic", sleep=300)
    _running(ctl, small)
    held = sorted(ctl.job(first).placement[home])
    assert ctl.job(small).gres == "gpu:2" and ctl.job(small).placement == {home: held}
    assert _gpus_of(ctl, small) == {home: held}
    four = ctl.submit("carol", "sys", 4, qos="opportunistic", sleep=300)
    _running(ctl, four)
    two = ctl.submit("carol", "sys", 2, qos="opportunistic", sleep=300)
    _running(ctl, two)
    (other,) = ctl.job(four).placement
    assert other != home and list(ctl.job(two).placement) == [other]
    left = sorted(set(range(8)) - set(ctl.job(four).placement[other]) - set(ctl.job(two).placement[other]))
    assert len(left) == 2 and left != held

    # an admin requeues it held, and an Operator's job (passed by the plugin untouched) takes its GPUs
    admin = ctl.lab.backend(ctl.lab.operator)
    admin.requeue_hold(small)
    ctl.lab.wait_for(small, {"PENDING"}, held=True)
    blocker = admin.submit(
        "#!/bin/sh\nsleep 300\n", ["-A", "hivebatch", "-w", home, "--gres=gpu:2", "-o", "/dev/null"]
    )
    ctl.mine.add(blocker)
    ctl.lab.wait_for(blocker, {"RUNNING"})
    assert _gpus_of(ctl, blocker) == {home: held}
    ctl.cycle()  # held for whoever held it, as plain Slurm keeps it, until they release it
    assert (ctl.job(small).reason or "").startswith(f"held by its owner: scontrol release {small}")
    admin.release(small)

    _running(ctl, small)
    assert _gpus_of(ctl, small) == {other: left}
    job = ctl.job(small)
    assert job.placement == {other: left} and job.gres == "gpu:2" and job.preemptions == 0
    out = ctl.lab.wait_for_file(ctl.output(small, "carol"), f"host={other}")
    # the job's own view: Slurm set CUDA_VISIBLE_DEVICES to the GPUs it granted this time
    assert out.strip().splitlines()[-1].endswith("cvd=" + ",".join(map(str, left)))
