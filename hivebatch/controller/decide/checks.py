"""Is a waiting job's request schedulable as it stands? Checked against the config and Slurm's record."""

from __future__ import annotations

from dataclasses import replace

from hivebatch.bounds import DEFAULT_LIMITS, Limits, request_problem
from hivebatch.cells import ClusterSpec
from hivebatch.controller.decide.gres import untyped_count
from hivebatch.db.models import Job
from hivebatch.errors import HivebatchError
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmJob

Checked = tuple[JobRequest | None, str | None]


def _slurm_mismatch(job: Job, req: JobRequest, sj: SlurmJob) -> str | None:
    """A GPU gres on the job that hivebatch did not grant (only an admin can put one there now)."""
    tres = str(sj.tres_per_node or "")
    if "gpu" in tres.lower():
        from hivebatch.slurm.parse import split_gres, typed_request

        if all(c == 0 for name, _kind, c, _ in split_gres(tres) if name == "gpu"):
            return None  # gpu:0 asks for none (cli_filter.lua writes it where srun's --gres meant GPUs)
        asked, _shards = typed_request(tres)
        granted = sorted(int(g.split(":")[1][1:]) for g in (job.gres or "").split(",") if g.count(":") == 2)
        count = untyped_count(job.gres)
        if count is not None:
            plain = [c for name, kind, c, _ in split_gres(tres) if name == "gpu" and kind is None]
            mismatch = asked != [] or plain != [count]
        else:
            mismatch = not job.gres or asked != granted
        if mismatch:
            # re-typing a gres makes Slurm grant old and new GPUs together, so such a job is never placed
            return f"the job asks Slurm for GPUs itself ({tres}); cancel it and resubmit with hsub, which adds no gres"
    return None


def check_request(
    job: Job, sj: SlurmJob | None, spec: ClusterSpec, limits: Limits = DEFAULT_LIMITS
) -> Checked:
    """The job's request, or the plain-words reason it cannot be scheduled as it stands."""
    if not job.request:
        return None, job.reason or "it carries no hivebatch request; cancel it and submit it again"
    try:
        # validated when it was read from the job's admin comment (request_from_slurm)
        req = JobRequest(**job.request)
        if sj is not None and (sj.account, sj.qos) != (req.vc, req.qos):
            # VC and class are the job's Slurm account and QOS, which its owner may change while it waits
            req = replace(req, vc=sj.account or req.vc, qos=sj.qos or req.qos)
            req.validate()
    except (TypeError, HivebatchError) as exc:
        return None, f"its hivebatch request is unusable ({exc}); cancel it and submit it again"
    out_of_bounds = request_problem(req, limits)
    if out_of_bounds:
        return None, out_of_bounds
    if req.vc not in spec.vcs:
        return None, (
            f"unknown VC {req.vc!r}: the config has {', '.join(sorted(spec.vcs))}; move it to one of them "
            f"(scontrol update job {job.slurm_job_id} Account=VC) or cancel it"
        )
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
