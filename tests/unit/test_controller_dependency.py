"""Held jobs' dependencies judged from squeue as slurmctld judges them (recorded on the lab)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from hivebatch.controller.decide.dependency import judge, shown
from hivebatch.controller.decide.eligible import not_eligible
from hivebatch.slurm.parse import job_from_json
from hivebatch.slurm.types import SlurmJob


def _snapshot(slurm_fixture, tag: str) -> tuple[dt.datetime, dict[int, SlurmJob]]:  # type: ignore[no-untyped-def]
    data = json.loads(slurm_fixture("squeue_dependency_kinds_held.json"))[tag]
    jobs = {j.job_id: j for j in map(job_from_json, data["jobs"])}
    return dt.datetime.fromtimestamp(data["time"], dt.UTC).replace(tzinfo=None), jobs


def _slurms_verdict(job: SlurmJob) -> str:
    if not job.dependency:
        return "met"
    return "never" if "(failed)" in job.dependency else "wait"


def test_the_controller_judges_at_once_what_slurm_decides_a_minute_later(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    now, before = _snapshot(slurm_fixture, "before")
    _, after = _snapshot(slurm_fixture, "after")
    held = [j for j in before.values() if j.user == "carol"]
    assert len(held) == 7 and all(j.dependency.endswith("(unfulfilled)") for j in held)  # stale for a minute
    verdicts = {j.name + ("" if j.name != "solo" else str(j.job_id)): judge(j, before, now) for j in held}
    assert verdicts == {
        "wait-all": "never",  # afterok on the whole array: its task 2 failed
        "any-one": "met",
        "ok-two": "met",
        "after-1min": "wait",  # the array started 8 s before
        "either": "met",  # afterok:A_2 failed, afterany:A_0 holds
        "solo2800": "met",
        "solo2801": "wait",  # 2800 of the same name was submitted first and waits
    }
    assert verdicts == {k: _slurms_verdict(after[j.job_id]) for k, j in zip(verdicts, held, strict=True)}
    # a minute after the array's start, `after:A+1` holds (Slurm's next purge pass says so)
    later = now + dt.timedelta(seconds=61)
    assert judge(next(j for j in held if j.name == "after-1min"), before, later) == "met"
    # Slurm's own text once it re-tested is judged the same
    assert [judge(after[j.job_id], after, now) for j in held] == [
        _slurms_verdict(after[j.job_id]) for j in held
    ]


def test_what_the_owner_reads(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    now, before = _snapshot(slurm_fixture, "before")
    by_name = {j.name: j for j in before.values() if j.user == "carol" and j.name != "solo"}
    assert not_eligible(by_name["wait-all"], now, others=before) == (
        "its dependency afterok:2794_* can never be met: cancel it (scancel 2795)"
    )
    assert not_eligible(by_name["after-1min"], now, others=before) == (
        "waits for its dependency after:2794_*+1; it holds no GPUs meanwhile"
    )
    assert not_eligible(by_name["ok-two"], now, others=before) is None
    assert shown("afterok:1(failed)?afterany:2(unfulfilled)") == "afterok:1?afterany:2"


def _job(job_id: int, state: str = "PENDING", name: str = "j", user: str = "alice", **kw: object) -> SlurmJob:
    return SlurmJob(job_id=job_id, name=name, user=user, account="cv", qos="normal", state=state,
                    reason="JobHeldUser", **kw)  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.parametrize(
    ("other_state", "other_id", "verdict"),
    [
        ("RUNNING", 5, "wait"),
        ("RUNNING", 20, "wait"),  # running blocks whoever came first
        ("PENDING", 5, "wait"),  # submitted first
        ("PENDING", 20, "met"),  # submitted later: it waits for this one
        ("COMPLETING", 5, "met"),
        ("COMPLETED", 5, "met"),
        ("SUSPENDED", 5, "wait"),
    ],
)
def test_singleton_follows_slurms_rule(other_state: str, other_id: int, verdict: str) -> None:
    me = _job(10, name="chain", dependency="singleton(unfulfilled)")
    other = _job(other_id, other_state, name="chain")
    stranger = _job(30, "RUNNING", name="chain", user="bob")  # another user's job of that name does not count
    namesake = _job(31, "RUNNING", name="other")
    assert (
        judge(me, {10: me, other_id: other, 30: stranger, 31: namesake}, dt.datetime(2026, 11, 27)) == verdict
    )


def test_what_cannot_be_told_is_left_to_slurm() -> None:
    now = dt.datetime(2026, 11, 27)
    me = _job(10, dependency="afterok:7_*(unfulfilled)")
    assert judge(me, {10: me}, now) == "wait"  # the array is gone from squeue
    assert judge(_job(11, dependency="aftercorr:7_*(unfulfilled)"), {7: _job(7, "COMPLETED")}, now) == "wait"
    assert judge(_job(12, dependency="singleton(unfulfilled)"), {}, now) == "wait"  # not the job's listing
    pending_tasks = _job(7, array_job_id=7, array_pending="3-5")
    done = _job(8, "COMPLETED", array_job_id=7, array_task_id=0)
    assert judge(me, {10: me, 7: pending_tasks, 8: done}, now) == "wait"  # tasks 3-5 still wait
    special = _job(9, "SPECIAL_EXIT")
    assert judge(_job(13, dependency="afternotok:9(unfulfilled)"), {9: special}, now) == "met"


@pytest.mark.parametrize(
    ("their_state", "verdict"),
    [
        ("COMPLETED", "met"),
        ("FAILED", "never"),
        ("RUNNING", "wait"),
        ("PENDING", "wait"),
        ("TIMEOUT", "never"),
    ],
)
def test_aftercorr_follows_the_task_of_the_same_index(their_state: str, verdict: str) -> None:
    # recorded on the lab (tests/fixtures/slurm/dependency_held_retest.txt): Slurm writes the target as
    # N_*, and under plain Slurm each task started 1-2 s after its own task of the other array ended
    now = dt.datetime(2026, 11, 27)
    me = _job(21, dependency="aftercorr:10_*(unfulfilled)", array_job_id=20, array_task_id=1)
    mine = _job(11, their_state, array_job_id=10, array_task_id=1)
    other = _job(12, "FAILED", array_job_id=10, array_task_id=2)  # another index does not count
    assert judge(me, {21: me, 11: mine, 12: other}, now) == verdict
    remainder = _job(10, array_job_id=10, array_pending="1-2")  # task 1 not split off yet
    assert judge(me, {21: me, 10: remainder}, now) == "wait"


def test_a_singleton_arrays_tasks_do_not_wait_for_each_other() -> None:
    # recorded on the lab (tests/fixtures/slurm/singleton_array.txt): plain Slurm started every task of the
    # array together once the earlier job of the name ended; hivebatch had run them one after another
    now = dt.datetime(2026, 11, 30)
    me = _job(506, dependency="singleton(unfulfilled)", name="sg", array_job_id=506, array_task_id=0)
    sibling = _job(507, "RUNNING", name="sg", array_job_id=506, array_task_id=2)
    rest = _job(508, name="sg", array_job_id=506, array_pending="1")
    assert judge(me, {506: me, 507: sibling, 508: rest}, now) == "met"
    earlier = _job(505, "RUNNING", name="sg")
    assert judge(me, {506: me, 507: sibling, 505: earlier}, now) == "wait"
    later_array = _job(520, "RUNNING", name="sg", array_job_id=520, array_task_id=0)
    assert judge(me, {506: me, 520: later_array}, now) == "wait"
