"""What squeue shows of a fake job: the SlurmJob record the backend hands its callers."""

from __future__ import annotations

from hivebatch.slurm.arrays import array_text
from hivebatch.slurm.types import FINISHED_STATES, SlurmJob
from hivebatch.testing.fake_slurm.scheduler import dependency_status
from hivebatch.testing.fake_slurm.state import Job, State


def dependency_text(state: State, j: Job) -> str:
    """squeue's form: the condition with its state, "" once fulfilled (Slurm drops it then)."""
    status = dependency_status(state, j)
    return "" if status == "fulfilled" or j.state != "PENDING" else f"{j.dependency}({status})"


def squeue_view(state: State, j: Job) -> SlurmJob:
    return SlurmJob(
        job_id=j.job_id,
        name=j.name,
        user=j.user,
        account=j.account,
        qos=j.qos,
        state=j.state,
        reason=j.reason,
        nodes=list(j.nodes) if j.state != "PENDING" else [],
        gpus={k: list(v) for k, v in j.gpus.items()},
        shards={k: dict(v) for k, v in j.shards.items()},
        comment=j.comment,
        admin_comment=j.admin_comment,
        dependency=dependency_text(state, j),
        kill_invalid_dep=j.kill_invalid_dep,
        eligible_time=j.eligible_at if j.state == "PENDING" else None,
        restarts=j.restarts,
        submit_time=j.submit_time,
        start_time=j.start_time if j.state != "PENDING" else None,
        end_time=j.end_time if j.state in FINISHED_STATES else None,
        time_limit_s=j.time_limit_s,
        time_min_s=j.time_min_s,
        deadline=j.deadline,
        num_nodes=j.num_nodes,
        cpus_per_node=j.cpus_per_node,
        mem_per_node_mb=j.mem_per_node_mb,
        mem_per_cpu_mb=j.mem_per_cpu_mb,
        tasks_per_node=j.tasks_per_node,
        tmp_disk_mb=j.tmp_disk_mb,
        tasks=j.tasks,
        cpus_total=j.cpus_total,
        held=j.held,
        exit_code=j.exit_code if j.state in FINISHED_STATES else None,
        tres_per_node=j.tres_per_node,
        required_nodes=list(j.required_nodes),
        partition="gpu",
        priority=0 if j.held else 1000,
        array_job_id=j.array_job_id,
        array_task_id=j.array_task_id,
        array_pending=array_text(j.array_pending, j.array_max) if j.array_pending else "",
        array_max_tasks=j.array_max,
        batch=j.batch,
        preempt_time=j.preempt_time if j.state != "PENDING" else None,
        grace_end=j.grace_end if j.state not in FINISHED_STATES else None,
    )
