"""Eligibility from Slurm's records: a held job's dependency and begin time (recorded on the lab)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace

from hivebatch.controller.decide.eligible import not_eligible, past_deadline
from hivebatch.request import ADMIN_HELD_BEGIN, CONTROLLER_HOLD_AT, HELD_BEGIN, RELEASED_BEGIN
from hivebatch.slurm.types import SlurmJob

NOW = dt.datetime(2026, 11, 24, 7, 0)


def job(job_id: int, state: str = "PENDING", **kw: object) -> SlurmJob:
    fields: dict[str, object] = {"reason": "JobHeldUser", **kw}
    return SlurmJob(
        job_id=job_id,
        name="j",
        user="alice",
        account="cv",
        qos="normal",
        state=state,
        **fields,
    )  # type: ignore[arg-type]


def test_a_dependency_slurm_has_not_re_tested_is_judged_from_squeue() -> None:
    waiting = job(2, dependency="afterok:1(unfulfilled)")
    assert not_eligible(waiting, NOW, others={1: job(1, "RUNNING")}).startswith(
        "waits for its dependency afterok:1"
    )
    # Slurm skips held jobs when it re-tests dependencies: its text stays stale after job 1 succeeded
    assert not_eligible(waiting, NOW, others={1: job(1, "COMPLETED")}) is None
    assert not_eligible(waiting, NOW, others={1: job(1, "FAILED")}) is not None  # afterok is not met
    assert not_eligible(job(3, dependency="afterany:1:4(unfulfilled)"), NOW,
                        others={1: job(1, "FAILED"), 4: job(4, "COMPLETED")}) is None  # fmt: skip
    # a job squeue no longer lists, or a dependency type hivebatch does not judge, is left to Slurm
    assert not_eligible(waiting, NOW, others={}) is not None
    assert not_eligible(job(5, dependency="singleton(unfulfilled)"), NOW, others={}) is not None


def test_a_begin_time_counts_for_a_first_start_only() -> None:
    later = job(6, eligible_time=dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC))
    assert not_eligible(later, NOW).startswith("waits for its begin time 2026-11-24 09:00 UTC")
    assert not_eligible(later, NOW, first_start=False) is None  # a requeued job's delay is Slurm's own


def test_a_begin_time_the_owner_gave_outlasts_their_release() -> None:
    # released, Slurm shows the plugin's far begin time (or, taken back, none); plain Slurm kept the job
    # pending for its --begin (tests/fixtures/slurm/begin_after_release.txt)
    nine = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
    comment = f'hivebatch:v2:{{"vc":"cv","qos":"normal","gpus":1,"begin":{int(nine.timestamp())}}}'
    released = replace(job(9, admin_comment=comment, eligible_time=dt.datetime.fromtimestamp(RELEASED_BEGIN, dt.UTC)),
                       reason="BeginTime")  # fmt: skip
    assert not_eligible(released, NOW).startswith("waits for its begin time 2026-11-24 09:00 UTC")
    # taken back, the controller gives Slurm that --begin again
    taken_back = replace(released, reason="JobHeldAdmin", eligible_time=nine)
    assert not_eligible(taken_back, NOW).startswith("waits for its begin time 2026-11-24 09:00 UTC")
    assert not_eligible(taken_back, nine.replace(tzinfo=None) + dt.timedelta(seconds=1)) is None


def test_a_start_time_the_owner_sets_while_the_job_waits_is_slurms_begin_time() -> None:
    # `scontrol update StartTime=` by the owner (tests/fixtures/slurm/owner_start_time.txt): earlier or
    # later than the --begin recorded at submit, Slurm's begin time is what the job waits for
    nine = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
    comment = f'hivebatch:v2:{{"vc":"cv","qos":"normal","gpus":1,"begin":{int(nine.timestamp())}}}'
    sooner = job(9, admin_comment=comment, eligible_time=NOW.replace(tzinfo=dt.UTC) - dt.timedelta(seconds=5))
    assert not_eligible(sooner, NOW) is None
    later = replace(sooner, eligible_time=nine + dt.timedelta(hours=1))
    assert not_eligible(later, NOW).startswith("waits for its begin time 2026-11-24 10:00 UTC")


def test_a_start_time_the_owner_set_before_their_hold_and_release_is_the_one_kept() -> None:
    # released, Slurm shows the plugin's far begin time; the ledger keeps the start time the owner set
    # while the job waited (a past time for "now"), which outranks the --begin recorded at submit
    nine = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
    comment = f'hivebatch:v2:{{"vc":"cv","qos":"normal","gpus":1,"begin":{int(nine.timestamp())}}}'
    released = replace(job(9, admin_comment=comment, eligible_time=dt.datetime.fromtimestamp(RELEASED_BEGIN, dt.UTC)),
                       reason="BeginTime")  # fmt: skip
    later = nine + dt.timedelta(hours=2)
    assert not_eligible(released, NOW, owner_begin=later.replace(tzinfo=None)).startswith(
        "waits for its begin time 2026-11-24 11:00 UTC"
    )
    assert not_eligible(released, NOW, owner_begin=NOW - dt.timedelta(minutes=1)) is None
    # on a job Slurm shows its own begin time for, that one counts
    waiting = replace(released, eligible_time=later)
    assert not_eligible(waiting, NOW, owner_begin=NOW - dt.timedelta(minutes=1)).startswith(
        "waits for its begin time 2026-11-24 11:00 UTC"
    )


def test_a_job_its_owner_held_after_submitting_it_waits_for_their_release() -> None:
    # the plugin marks the owner's `scontrol hold` with a begin time of 2100-01-02 (tests/lua): Slurm
    # shows the plugin's own hold as the same JobHeldUser (seen on the lab: the controller released it)
    held = job(7, eligible_time=dt.datetime.fromtimestamp(HELD_BEGIN, dt.UTC))
    assert not_eligible(held, NOW) == "held by its owner: scontrol release 7 lets hivebatch place it"
    assert not_eligible(job(8), NOW) is None  # the plugin's own hold alone
    # released: Slurm shows the far begin time without the hold; the controller takes the job back
    assert not_eligible(replace(held, reason="BeginTime"), NOW) is None


def test_a_job_an_admin_held_waits_for_an_admins_release() -> None:
    # the plugin marks an admin's `scontrol hold` with a begin time of 2100-01-03; the controller's own
    # hold is JobHeldAdmin too, without it (tests/fixtures/slurm/admin_hold_marked.txt)
    marked = dt.datetime.fromtimestamp(ADMIN_HELD_BEGIN, dt.UTC)
    held = replace(job(7, eligible_time=marked), reason="JobHeldAdmin")
    assert (
        not_eligible(held, NOW)
        == "held by an admin: it waits until an admin releases it (scontrol release 7)"
    )
    assert not_eligible(replace(job(8), reason="JobHeldAdmin"), NOW) is None  # the controller's own hold
    # a task of an array is named as scontrol reads it: its bare job id can be the whole array's
    task = replace(held, job_id=663, array_job_id=663, array_task_id=2)
    assert (
        not_eligible(task, NOW)
        == "held by an admin: it waits until an admin releases it (scontrol release 663_2)"
    )
    # released by the admin: the far begin time stays without the hold; the controller takes the job back
    assert not_eligible(replace(held, reason="BeginTime"), NOW) is None


def test_the_hold_marks_are_those_recorded_on_the_lab(slurm_fixture: Callable[[str], str]) -> None:
    text = slurm_fixture("admin_hold_marked.txt")
    ours = CONTROLLER_HOLD_AT.strftime("%Y-%m-%dT%H:%M:%S")
    assert f"Priority=0 StartTime={ours}" in text  # the controller's hold, as CliBackend sends it
    admins = dt.datetime.fromtimestamp(ADMIN_HELD_BEGIN, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    released = dt.datetime.fromtimestamp(RELEASED_BEGIN, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert f"JobHeldAdmin {admins}" in text and f"None {released}" in text
    listed = [line for line in text.splitlines() if line[:1].isdigit()]  # squeue's rows
    assert listed and not any(ours in line for line in listed)  # the plugin drops it: no job shows it


def test_a_job_past_its_deadline_is_slurms_to_end() -> None:
    # slurmctld's deadline_ok: now + --time-min (or the time limit) after the deadline
    # (tests/fixtures/slurm/deadline_held.txt); 2 s of margin for the controller's clock
    deadline = dt.datetime(2026, 11, 24, 7, 3, tzinfo=dt.UTC)
    late = job(9, deadline=deadline, time_limit_s=300)
    assert past_deadline(late, NOW) == (
        "its deadline 2026-11-24 07:03:00 UTC can no longer be met "
        "(its time limit of 5 min would end after it): Slurm ends it as DEADLINE"
    )
    assert past_deadline(replace(late, time_limit_s=180), NOW) is None  # ends exactly at it
    assert past_deadline(replace(late, time_limit_s=181), NOW) is None  # inside the margin
    assert past_deadline(replace(late, time_limit_s=183), NOW) is not None
    # --time-min is what Slurm judges by when given (it then shortens the limit to fit)
    assert past_deadline(replace(late, time_min_s=120), NOW) is None
    assert "its --time-min of 4 min" in (past_deadline(replace(late, time_min_s=240), NOW) or "")
    # no deadline, or no limit: never late
    assert past_deadline(replace(late, deadline=None), NOW) is None
    assert past_deadline(replace(late, time_limit_s=None), NOW) is None


def test_a_job_whose_time_limit_is_over_its_partitions_max_time_waits_saying_how_to_fix_it() -> None:
    # Slurm accepts such a job (EnforcePartLimits=NO, its default) and never starts it
    # (tests/fixtures/slurm/partition_time_limit.txt); the controller pinned it node after node
    from hivebatch.controller.decide.eligible import over_partition_time

    long = job(7, partition="gpu", time_limit_s=3600)
    assert over_partition_time(long, {"gpu": 1800}) == (
        "its time limit (01:00:00) is longer than Slurm allows: partition gpu's MaxTime is 00:30:00; "
        "lower it (scontrol update job 7 TimeLimit=00:30:00) or cancel it"
    )
    assert over_partition_time(replace(long, time_limit_s=1800), {"gpu": 1800}) is None
    assert over_partition_time(long, {}) is None  # no MaxTime
    assert over_partition_time(replace(long, partition="gpu,long"), {"gpu": 1800}) is None  # long has none
    assert over_partition_time(replace(long, partition="gpu,short"), {"gpu": 1800, "short": 600}) is not None


def test_a_job_whose_partitions_are_all_down_waits() -> None:
    from hivebatch.controller.decide.eligible import partition_stopped

    down = job(7, partition="gpu")
    assert partition_stopped(down, {"gpu": "DOWN"}) == (
        "its partition gpu is DOWN: Slurm starts no job there until an admin sets it UP again; "
        "it holds no GPUs meanwhile"
    )
    assert partition_stopped(replace(down, partition="gpu,debug"), {"gpu": "DOWN"}) is None
    assert partition_stopped(down, {}) is None


def test_whose_hold_a_held_job_waits_for_as_recorded_on_the_lab(slurm_fixture: Callable[[str], str]) -> None:
    # tests/fixtures/slurm/owner_hold_of_held.txt: the reason Slurm shows and the begin time of each hold
    # after the owner's own scontrol hold, as scontrol showed them
    from hivebatch.request import admin_holds, held_over_ours, owner_holds

    text = slurm_fixture("owner_hold_of_held.txt")
    after = text[text.index("# After: the plugin marks") :]
    shown = [
        line.split() for line in after.splitlines() if line.strip().startswith(("JobState=", "StartTime="))
    ]
    records = [
        job(7, reason=state[1].split("=")[1], eligible_time=dt.datetime.fromisoformat(start[0].split("=")[1]).replace(tzinfo=dt.UTC))
        for state, start in zip(shown[0::2], shown[1::2], strict=True)
    ]  # fmt: skip
    admin_held, task_held, task_user_held = records
    assert admin_holds(admin_held) and not owner_holds(admin_held) and not held_over_ours(admin_held)
    # the owner's hold of the controller's: theirs, and the controller makes it a hold they may release
    assert owner_holds(task_held) and held_over_ours(task_held) and not admin_holds(task_held)
    assert (
        owner_holds(task_user_held) and not held_over_ours(task_user_held) and not admin_holds(task_user_held)
    )
    assert not_eligible(task_held, NOW) == "held by its owner: scontrol release 7 lets hivebatch place it"
    assert (
        not_eligible(task_user_held, NOW) == "held by its owner: scontrol release 7 lets hivebatch place it"
    )
