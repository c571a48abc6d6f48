"""The hivebatch request of a GPU job, as Slurm's job_submit plugin recorded it.

Whatever client submits a GPU job (hsub, sbatch, srun, salloc, a workflow tool), slurmctld's
``job_submit.lua`` takes the GPU ask off the job, writes it into the job's *admin comment* (which only
SlurmUser/root and the plugin can set) and holds the job. The controller trusts nothing else: the
VC is the job's Slurm account and the class its QOS, both authenticated by Slurm. hsub's model hints
(model, batch size, iterations, ``--within``) ride in the ordinary comment; they only tune the
prediction for the user's own job, so a user who edits them changes nothing for anyone else.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from hivebatch.errors import HivebatchError
from hivebatch.slurm.parse import split_gres
from hivebatch.slurm.types import REQUEUED_HELD

#: the admin comment the job_submit plugin writes (hivebatch/data/job_submit.lua)
ADMIN_PREFIX = "hivebatch:v2:"
#: begin time (2100-01-01) the plugin gives a waiting GPU job whose owner released it, so Slurm never
#: starts it without its GPUs; the controller takes the job back under its own hold
RELEASED_BEGIN = 4102444800
RELEASED_BEGIN_AT = dt.datetime(2100, 1, 1)  # naive UTC, as hq keeps its times
#: begin time (2100-01-02) the plugin gives a waiting GPU job its owner held after submitting it
#: (scontrol hold): Slurm shows the plugin's own hold as the same user hold
HELD_BEGIN = RELEASED_BEGIN + 86400
HELD_BEGIN_AT = dt.datetime.fromtimestamp(HELD_BEGIN, dt.UTC)
#: begin time (2100-01-03) the plugin gives a waiting GPU job an admin held (scontrol hold): the
#: controller leaves it until an admin releases it
ADMIN_HELD_BEGIN = RELEASED_BEGIN + 2 * 86400
#: begin time (2100-01-04) the controller's own hold asks for, which the plugin drops: the controller
#: holds as an Operator, so Slurm shows its hold as an admin's
CONTROLLER_HOLD_AT = dt.datetime.fromtimestamp(RELEASED_BEGIN + 3 * 86400, dt.UTC)
#: site factor that marks an owner's hold for the plugin, which can read no begin time (job_submit.lua)
OWNER_HOLD_SITE = -3
#: hsub's model hints in the user's comment
HINTS_PREFIX = "hivebatch:hints:"
MODEL_HINTS = ("model", "like", "batch_size", "iters", "within")
#: gpu_mem_mib as a hint is the share of each GPU a *whole* job declares it uses (slices are shards)
HINT_FIELDS = (*MODEL_HINTS, "gpu_mem_mib")
#: what the plugin records besides the request proper (translations it made, the owner's own hold)
PLUGIN_EXTRAS = (
    "user_hold",
    "cpus_per_gpu",
    "mem_per_gpu_mb",
    "ntasks_per_gpu",
    "tres_bind",
    "tres_freq",
    # the job's --signal, for its preemption notice (hivebatch.notice)
    "signal",
    "signal_time_s",
    "signal_batch",
    # an --exclusive job reaching GPU nodes: the plugin made it a whole-node GPU job
    "exclusive",
    # the owner's -w/--nodelist (a hostlist): the job is placed on those nodes only
    "nodelist",
    # the owner's --begin (epoch seconds): a release replaces Slurm's begin time while the job waits
    "begin",
    # --gpus-per-task with -n: on several nodes each holds whole tasks' GPUs
    "gpus_per_task",
)
CLASSES = ("urgent", "prior", "normal", "opportunistic")
#: cell-core priority of each class: opportunistic work is -1, guaranteed classes rank urgent > prior > normal
CLASS_PRIORITY = {"opportunistic": -1, "normal": 0, "prior": 1, "urgent": 2}
_SAFE = re.compile(r"^[A-Za-z0-9._+-]{1,64}$")


@dataclass(frozen=True)
class JobRequest:
    vc: str
    qos: str = "normal"
    gpus: int = 1
    nodes: int | None = None
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    within: str | None = None
    model: str | None = None
    like: str | None = None
    batch_size: int | None = None
    iters: int | None = None
    time_limit_s: int | None = None
    gpu_mem_mib: int | None = None

    @property
    def priority(self) -> int:
        """Cell-core priority of the job's class (CLASS_PRIORITY)."""
        return CLASS_PRIORITY[self.qos]

    def validate(self) -> None:
        if self.qos not in CLASSES:
            raise HivebatchError(f"unknown class {self.qos!r}: use one of {', '.join(CLASSES)}")
        for name in ("vc", "gpu_type", "within", "model", "like"):
            value = getattr(self, name)
            if value is not None and not _SAFE.match(value):
                raise HivebatchError(
                    f"{name.replace('_', '-')} {value!r} may only contain letters, digits and . _ + - (at most 64)"
                )
        for name in ("gpus", "nodes", "gpus_per_node", "batch_size", "iters", "time_limit_s", "gpu_mem_mib"):
            value = getattr(self, name)
            # bool is an int in Python; a JSON true is not one GPU
            if value is not None and (type(value) is not int or value < (0 if name == "gpus" else 1)):
                raise HivebatchError(
                    f"{name.replace('_', '-')} must be a positive whole number, got {value!r}"
                )
        if self.nodes and self.gpus_per_node and self.gpus != self.nodes * self.gpus_per_node:
            raise HivebatchError(
                f"--gpus {self.gpus} does not equal --nodes {self.nodes} × --gpus-per-node {self.gpus_per_node}"
            )

    def hints_comment(self) -> str:
        """hsub's hints for the user's comment ("" when there are none)."""
        hints = {k: getattr(self, k) for k in HINT_FIELDS if getattr(self, k) is not None}
        return HINTS_PREFIX + json.dumps(hints, separators=(",", ":"), sort_keys=True) if hints else ""

    def to_admin_comment(self, **extras: Any) -> str:
        """What the job_submit plugin writes for this request (tests and recorded fixtures use it)."""
        self.validate()
        payload = {k: v for k, v in asdict(self).items() if v is not None and k not in MODEL_HINTS}
        payload.update(extras)
        return ADMIN_PREFIX + json.dumps(payload, separators=(",", ":"), sort_keys=True)


class RequestError(HivebatchError):
    """A job's admin comment says it is hivebatch's, but the request in it cannot be trusted."""


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError:
        raise RequestError(f"its {what} is not valid JSON") from None
    if not isinstance(raw, dict):
        raise RequestError(f"its {what} is not a JSON object")
    return raw


def read_hints(comment: str | None) -> dict[str, Any]:
    """hsub's hints at the start of the user's comment; anything unreadable is no hint at all."""
    if not comment or not comment.startswith(HINTS_PREFIX):
        return {}
    body = comment[len(HINTS_PREFIX) :].split(" ", 1)[0]
    try:
        raw = _json_object(body, "hints")
    except RequestError:
        return {}
    return {k: v for k, v in raw.items() if k in HINT_FIELDS}


# all scalars, frozen: a request read once is shared by every cycle that reads the same job again
@functools.lru_cache(maxsize=65536)
def request_from_slurm(
    admin_comment: str | None,
    comment: str | None,
    account: str,
    qos: str,
    time_limit_s: int | None = None,
) -> JobRequest | None:
    """The request of a job from what Slurm authenticated: None when the job is not hivebatch's.

    The shape comes from the plugin's admin comment, VC and class from the job's current account and
    QOS, the time limit from Slurm's current one, the hints from the comment (dropped if invalid).
    RequestError when the admin comment is ours but malformed or forged."""
    if not admin_comment or not admin_comment.startswith(ADMIN_PREFIX):
        return None
    raw = _json_object(admin_comment[len(ADMIN_PREFIX) :], "admin comment")
    # the shape the plugin records: everything but VC and class (Slurm's) and the owner's model hints
    known = {f.name for f in fields(JobRequest)} - {"vc", "qos", *MODEL_HINTS}
    unknown = sorted(set(raw) - known - set(PLUGIN_EXTRAS) - {"vc", "qos"})
    if unknown:
        raise RequestError(f"its admin comment has fields hivebatch never writes: {', '.join(unknown)}")
    shape = {k: v for k, v in raw.items() if k in known}
    if time_limit_s is not None:
        shape["time_limit_s"] = time_limit_s
    try:
        req = JobRequest(vc=account, qos=qos, **shape)
        req.validate()
    except (TypeError, HivebatchError) as exc:
        raise RequestError(f"its request is invalid: {exc}") from None
    # a hint fills in what the plugin did not record; it never overrides what Slurm saw (a slice's size)
    hints = {k: v for k, v in read_hints(comment).items() if getattr(req, k) is None}
    if hints:
        try:
            hinted = replace(req, **hints)
            hinted.validate()
            req = hinted
        except (TypeError, HivebatchError):
            pass  # a bad hint only loses the prediction's tuning, never the job
    return req


def request_of(job: Any) -> JobRequest | None:
    """For readers (hq, rebuilds, predictions): a Slurm job's trusted request, None when the job is not
    hivebatch's or its admin comment cannot be trusted (the controller reports those)."""
    try:
        return request_from_slurm(
            getattr(job, "admin_comment", ""),
            getattr(job, "comment", ""),
            str(getattr(job, "account", "") or ""),
            str(getattr(job, "qos", "") or ""),
            getattr(job, "time_limit_s", None),
        )
    except RequestError:
        return None


def plugin_extras(job: Any) -> dict[str, Any]:
    """What the job_submit plugin recorded besides the request (``PLUGIN_EXTRAS``); empty when the job
    is not hivebatch's or its admin comment cannot be read."""
    text = str(getattr(job, "admin_comment", "") or "")
    return dict(_extras_in(text)) if text.startswith(ADMIN_PREFIX) else {}


@functools.lru_cache(maxsize=65536)
def _extras_in(admin_comment: str) -> dict[str, Any]:
    # a cycle asks a job's extras several times, and every cycle asks every waiting job's again: the
    # comment is parsed once (callers get a copy)
    try:
        raw = _json_object(admin_comment[len(ADMIN_PREFIX) :], "admin comment")
    except RequestError:
        return {}
    return {k: v for k, v in raw.items() if k in PLUGIN_EXTRAS}


def owner_holds(job: Any) -> bool:
    """The job is held for its owner to release: they held it themselves (sbatch --hold, scontrol hold or
    requeuehold later), or an Operator's ``scontrol uhold`` did, and it is not released yet."""
    reason, begin = getattr(job, "reason", ""), _begin_s(job)
    if reason == "JobHeldAdmin":
        # their hold of a job the controller holds: Slurm kept the admin's hold, the plugin marked theirs
        # (its mark of an admin's own hold, which their hold leaves, is ADMIN_HELD_BEGIN)
        return begin == HELD_BEGIN
    if reason == "JobHeldUser" and begin == ADMIN_HELD_BEGIN:
        return True  # an Operator's uhold, which the plugin marks as any Operator's hold
    # a job requeued held by someone else carries the same marker (controller/reconcile/machine.py)
    if reason not in ("JobHeldUser", REQUEUED_HELD):
        return False
    # the plugin's record of a submit-time hold (sbatch --hold) says nothing once the job has run: a
    # requeue-hold of the controller's (an incident, a preemption) of a job they once released is not theirs
    return begin == HELD_BEGIN or (reason == "JobHeldUser" and plugin_extras(job).get("user_hold") == 1)


def owner_hold_marked(job: Any) -> bool:
    """Its owner held the waiting job after submitting it, which the plugin marked with HELD_BEGIN."""
    return getattr(job, "reason", "") == "JobHeldUser" and _begin_s(job) == HELD_BEGIN


def held_over_ours(job: Any) -> bool:
    """Its owner held a job the controller holds: Slurm keeps that an admin's hold, which they could not
    release (tests/fixtures/slurm/owner_hold_of_held.txt); an Operator's ``scontrol uhold`` makes it
    theirs."""
    return getattr(job, "reason", "") == "JobHeldAdmin" and owner_holds(job)


def admin_holds(job: Any) -> bool:
    """An admin held the job (scontrol hold) and has not released it yet."""
    return getattr(job, "reason", "") == "JobHeldAdmin" and _begin_s(job) == ADMIN_HELD_BEGIN


def released_by_owner(job: Any) -> bool:
    """The plugin parked the job behind its far begin time after its owner released it (where no hold
    stands, that is the mark its begin time carries)."""
    return begin_marked(job)


def begin_asked(job: Any, owner_begin: dt.datetime | None = None) -> dt.datetime | None:
    """The earliest start its owner gave the job, None for none: Slurm's begin time, theirs (``--begin``,
    or a start time they set with ``scontrol update`` while it waits), or, where one of the plugin's marks
    stands in its place (their hold or release), the last one they gave (``begin_kept``)."""
    # a begin time of RELEASED_BEGIN or later is one of the plugin's marks, not the owner's
    return begin_kept(job, owner_begin) if released_by_owner(job) else getattr(job, "eligible_time", None)


def begin_kept(job: Any, owner_begin: dt.datetime | None) -> dt.datetime | None:
    """The last start its owner gave the job: the start time the controller saw them set while it
    waited (``owner_begin``, a past time for "now"), else the ``--begin`` recorded at submit."""
    if owner_begin is not None:
        return owner_begin if owner_begin.tzinfo is not None else owner_begin.replace(tzinfo=dt.UTC)
    return begin_recorded(job)


def begin_marked(job: Any) -> bool:
    """Slurm's begin time of the job is one of the plugin's marks (a hold, a release), not its owner's."""
    begin = _begin_s(job)
    return begin is not None and begin >= RELEASED_BEGIN


def begin_recorded(job: Any) -> dt.datetime | None:
    """The ``--begin`` the plugin recorded at submit, None for none: a release replaces Slurm's while the
    job waits, so the controller gives it back when it takes the job back."""
    if '"begin"' not in str(getattr(job, "admin_comment", "") or ""):
        return None  # most jobs: no JSON to read, each cycle, for every waiting job
    recorded = plugin_extras(job).get("begin")
    return dt.datetime.fromtimestamp(recorded, dt.UTC) if isinstance(recorded, int) and recorded > 0 else None


def kept_gpus(job: Any) -> bool:
    """A waiting job still asks Slurm for the GPUs of an earlier pin (taken back or requeued: Slurm never
    re-types a job). The plugin parks the controller's hold of such a job behind RELEASED_BEGIN, so that
    an admin's release does not start it there."""
    return any(name in ("gpu", "shard") and count > 0 for name, _t, count, _ in split_gres(job.tres_per_node))


def _begin_s(job: Any) -> int | None:
    """The job's begin time as Slurm lists it, in epoch seconds (None: it has none)."""
    begin = getattr(job, "eligible_time", None)
    return None if begin is None else int(begin.timestamp())
