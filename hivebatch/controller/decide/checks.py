"""Is a waiting job's request schedulable as it stands? Checked against the config and Slurm's record."""

from __future__ import annotations

from hivebatch.cells import ClusterSpec
from hivebatch.db.models import Job
from hivebatch.errors import HivebatchError
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmJob

Checked = tuple[JobRequest | None, str | None]


def _slurm_mismatch(job: Job, req: JobRequest, sj: SlurmJob) -> str | None:
    """What the owner changed in Slurm behind the request's back (account, QOS, a GPU gres)."""
    if sj.account and sj.account != req.vc:
        return (
            f"the request names VC {req.vc} but the Slurm account is {sj.account}; resubmit with -A {req.vc}"
        )
    if sj.qos and sj.qos != req.qos:
        return f"the request names class {req.qos} but the Slurm QOS is {sj.qos}; resubmit with -q {req.qos}"
    tres = str(sj.tres_per_node or "")
    if "gpu" in tres.lower():
        from hivebatch.slurm.parse import typed_request

        asked, _shards = typed_request(tres)
        granted = sorted(int(g.split(":")[1][1:]) for g in (job.gres or "").split(",") if g.count(":") == 2)
        if not job.gres or asked != granted:
            # re-typing a gres makes Slurm grant old and new GPUs together, so such a job is never placed
            return f"the job asks Slurm for GPUs itself ({tres}); cancel it and resubmit with hsub, which adds no gres"
    return None


def check_request(job: Job, sj: SlurmJob | None, spec: ClusterSpec) -> Checked:
    """The job's request, or the plain-words reason it cannot be scheduled as it stands."""
    try:
        # validated when it was read from the Slurm comment (JobRequest.from_comment); not again each cycle
        req = JobRequest(**(job.request or {}))
    except (TypeError, HivebatchError) as exc:
        return None, f"its hivebatch request is unreadable ({exc}); resubmit it with hsub"
    if req.vc not in spec.vcs:
        return None, f"unknown VC {req.vc!r}: the config has {', '.join(sorted(spec.vcs))}"
    problem = _slurm_mismatch(job, req, sj) if sj is not None else None
    if problem:
        return None, problem
    if req.gpu_type is not None and req.gpu_type not in spec.gpu_types:
        return None, f"unknown GPU type {req.gpu_type!r}: the cluster has {', '.join(spec.gpu_types)}"
    if req.priority >= 0:
        held = spec.vc_gpus(req.vc, req.gpu_type)
        if req.gpus > held:
            return (
                None,
                f"asks for {req.gpus} GPUs but VC {req.vc} holds only {held}; ask for fewer or use -q opportunistic",
            )
    return req, None
