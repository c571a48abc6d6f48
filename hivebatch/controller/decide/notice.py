"""Steps around the policy round for preemption with notice (hivebatch.cells.notice).

``prime_notices`` (first) tells the cell core, as plain data, what each job holding GPUs would lose if
preempted now and the notice it would get; ``collect_notices`` (after the round) turns the victims the
core told to leave into decisions for act: signal them, and requeue them when the notice ends.
"""

from __future__ import annotations

from hivebatch.cells.notice import NoticeBook
from hivebatch.controller.decide.times import epoch, from_epoch
from hivebatch.controller.decide.types import Round
from hivebatch.db.models import Job
from hivebatch.notice import notice_seconds, signal_of
from hivebatch.request import plugin_extras


def lost_if_preempted(r: Round, job: Job) -> float:
    """GPU-seconds of the job's current run; nothing for one in notice (it has been told already: what
    it did not save is lost anyway) or not started."""
    if job.state != "running" or job.notice_until is not None or job.segment_start is None:
        return 0.0
    gpus = sum(len(v) for v in (job.placement or {}).values()) or job.gpus or 0
    return max(0.0, (r.now - job.segment_start).total_seconds()) * gpus


def prime_notices(r: Round) -> None:
    book = NoticeBook(now=epoch(r.now))
    stake: dict[str, float] = {}
    notice_s: dict[str, float] = {}
    leaving: dict[str, float] = {}
    names: dict[str, str] = {}
    for sid, job in r.ledger.jobs.items():
        if job.foreign or job.state != "running":
            continue
        stake[str(sid)] = lost_if_preempted(r, job)
        sj = r.ledger.slurm.get(sid)
        if sj is not None and sj.array_job_id is not None:
            names[str(sid)] = sj.display_id  # an array's task as hq and squeue show it
        if job.notice_until is not None:
            leaving[str(sid)] = epoch(job.notice_until)
            continue
        spec = signal_of(plugin_extras(sj))
        notice_s[str(sid)] = float(notice_seconds(r.ctx.notice, job.qos, spec))
    book.notice_s, book.leaving, book.names = notice_s, leaving, names
    # jobs that told victims to leave, while those wait to be placed again: they go first in their VC
    book.claimants = frozenset(
        str(j.notice_by) for j in r.ledger.jobs.values() if j.notice_by is not None and j.priority >= 0
    )
    r.alloc.at_stake = stake
    r.alloc.notice = book


def collect_notices(r: Round) -> None:
    book = r.alloc.notice
    if book is None:
        return
    for victim, (by, until) in book.told.items():
        job = r.by_sid.get(victim)
        when = from_epoch(until)
        if job is not None and when is not None and by.isdigit():
            r.out.notices[job.slurm_job_id] = (int(by), when)
