"""Licenses (-L) as Slurm counts them on the lab (tests/fixtures/slurm/licenses.txt)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path

import pytest
from decide_support import NOW, context, make_round, row

from hivebatch.controller.decide.classify import classify
from hivebatch.controller.decide.licenses import hold_back_licensed, short_of_licenses
from hivebatch.controller.decide.policy_round import run_policy_round
from hivebatch.controller.decide.room import screen_hopeless
from hivebatch.controller.decide.unstarted import take_back_unstarted
from hivebatch.request import JobRequest
from hivebatch.slurm.parse import license_asks, parse_licenses, parse_squeue_json
from hivebatch.slurm.types import SlurmJob


def test_recorded_license_counts_are_read(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    text = slurm_fixture("licenses.txt")
    counts = [parse_licenses(line) for line in text.splitlines() if line.startswith("LicenseName=")]
    assert counts == [{"matlab": 1}, {"matlab": 0}]  # before the first job, and while it runs
    assert parse_licenses("No licenses configured in Slurm.\n") == {}


@pytest.mark.parametrize(
    ("text", "asks"),
    [("matlab:1", {"matlab": 1}), ("matlab:2,ansys", {"matlab": 2, "ansys": 1}), ("", {}),
     ("fluent@flexlm:4", {"fluent@flexlm": 4}), ("a:1|b:1", None), ("a:x", None)],
)  # fmt: skip
def test_a_jobs_licenses_are_read_as_squeue_lists_them(text: str, asks: dict[str, int] | None) -> None:
    assert license_asks(text) == asks


def test_squeue_lists_a_jobs_licenses(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(slurm_fixture("squeue.json"))
    assert parse_squeue_json(json.dumps(data))[0].licenses == ""  # asked none: squeue lists null
    data["jobs"][0]["licenses"] = "matlab:1"  # as licenses.txt shows it
    assert parse_squeue_json(json.dumps(data))[0].licenses == "matlab:1"


def _sj(licenses: str) -> SlurmJob:
    return SlurmJob(job_id=1, name="j", user="bob", account="nlp", qos="normal", state="PENDING", reason="",
                    licenses=licenses)  # fmt: skip


@pytest.mark.parametrize(
    ("licenses", "left", "why"),
    [
        ("matlab:1", {"matlab": 0}, "waits for licenses: matlab (0 free, it needs 1); it holds no GPUs meanwhile"),
        ("matlab:2", {"matlab": 1}, "waits for licenses: matlab (1 free, it needs 2); it holds no GPUs meanwhile"),
        ("matlab:1", {"matlab": -1}, "waits for licenses: matlab (0 free, it needs 1); it holds no GPUs meanwhile"),
        ("matlab:1", {"matlab": 1}, None),
        ("remote@db:1", {"matlab": 0}, None),  # not listed: Slurm judges
        ("matlab:1", None, None),
        ("", {"matlab": 0}, None),
    ],
)  # fmt: skip
def test_a_job_waits_without_cells_for_licenses_taken(
    licenses: str, left: dict[str, int] | None, why: str | None
) -> None:
    assert short_of_licenses(_sj(licenses), left) == why


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return context(Path(tmp_path_factory.mktemp("licenses")))


def _round(ctx, jobs, free: int):  # type: ignore[no-untyped-def]
    r = make_round(ctx, jobs)
    for j in jobs:
        r.ledger.slurm[j.slurm_job_id] = replace(r.ledger.slurm[j.slurm_job_id], licenses="matlab:1")
    r.ledger.licenses = {"matlab": free}
    return r


def test_of_the_jobs_one_round_places_those_beyond_the_free_licenses_wait(ctx) -> None:  # type: ignore[no-untyped-def]
    # through hivebatch three -L matlab:1 jobs were pinned in one cycle with one license free: two waited on
    # Licenses holding their GPUs
    jobs = [row(i, JobRequest(vc="nlp", gpus=1, time_limit_s=1800)) for i in (1, 2, 3)]
    r = _round(ctx, jobs, free=1)
    classify(r)
    screen_hopeless(r)
    run_policy_round(r)
    hold_back_licensed(r)
    (placed,) = r.out.places
    waiting = [w for w in r.out.waits if w.reason.startswith("waits for licenses: matlab (0 free")]
    assert len(waiting) == 2 and set(r.alloc.jobs()) == {str(placed.job.slurm_job_id)}
    # they are predicted to start when the one placed ends
    assert placed.predicted_end is not None and {w.predicted_start for w in waiting} == {placed.predicted_end}


def test_licenses_asked_by_pins_slurm_has_not_started_are_not_free(ctx) -> None:  # type: ignore[no-untyped-def]
    pinned = row(1, JobRequest(vc="nlp", gpus=1), state="placed", placement={"node1": [0]}, gres="gpu:g0:1",
                 placed_at=NOW - dt.timedelta(seconds=5))  # fmt: skip
    waiting = row(2, JobRequest(vc="nlp", gpus=1))
    r = _round(ctx, [pinned, waiting], free=1)
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], held=False, reason="Priority")
    r.alloc.adopt("1", "nlp", 0, pinned.placement)
    classify(r)
    assert [w.reason for w in r.out.waits] == [
        "waits for licenses: matlab (0 free, it needs 1); it holds no GPUs meanwhile"
    ]


def test_a_pin_waiting_for_licenses_another_job_took_is_taken_back_at_once(ctx) -> None:  # type: ignore[no-untyped-def]
    pinned = row(1, JobRequest(vc="nlp", gpus=1), state="placed", placement={"node1": [0]}, gres="gpu:g0:1",
                 placed_at=NOW - dt.timedelta(seconds=5))  # fmt: skip
    r = _round(ctx, [pinned], free=0)
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], held=False, reason="Licenses")
    r.alloc.adopt("1", "nlp", 0, pinned.placement)
    take_back_unstarted(r)
    (back,) = r.out.take_backs
    assert back.why == "licenses it needs were taken first (Slurm's reason: Licenses)" and not back.avoid
    assert "1" not in r.alloc.jobs()


def _holding(sid: int, licenses: str, limit_s: int, started_ago_s: int, **kw: object) -> SlurmJob:
    """A running job (a plain one: not in the ledger) holding ``licenses`` until its time limit."""
    return SlurmJob(job_id=sid, name="j", user="carol", account="sys", qos="normal", state="RUNNING", reason="",
                    licenses=licenses, time_limit_s=limit_s, start_time=NOW - dt.timedelta(seconds=started_ago_s),
                    **kw)  # type: ignore[arg-type]  # fmt: skip


def test_a_job_waiting_for_licenses_is_predicted_to_start_when_their_holders_end(ctx) -> None:  # type: ignore[no-untyped-def]
    waiting = row(1, JobRequest(vc="nlp", gpus=1))
    r = _round(ctx, [waiting], free=0)
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], licenses="matlab:2")
    # two holders of one license each: one ends in 10 min, one in 40 (their time limits)
    r.ledger.slurm[7] = _holding(7, "matlab:1", 3600, 3000)
    r.ledger.slurm[8] = _holding(8, "matlab:1", 3600, 1200)
    classify(r)
    (w,) = r.out.waits
    assert w.reason.startswith("waits for licenses: matlab (0 free, it needs 2)")
    assert w.predicted_start == NOW + dt.timedelta(minutes=40)  # both must end


def test_no_start_is_predicted_where_a_holder_has_no_known_end(ctx) -> None:  # type: ignore[no-untyped-def]
    waiting = row(1, JobRequest(vc="nlp", gpus=1))
    r = _round(ctx, [waiting], free=0)
    r.ledger.slurm[7] = replace(_holding(7, "matlab:1", 3600, 0), time_limit_s=None)
    classify(r)
    assert r.out.waits[0].predicted_start is None
    # nor where the cluster has fewer than it asks
    r = _round(ctx, [row(1, JobRequest(vc="nlp", gpus=1))], free=0)
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], licenses="matlab:3")
    r.ledger.slurm[7] = _holding(7, "matlab:1", 3600, 0)
    classify(r)
    assert r.out.waits[0].predicted_start is None
