"""A job on as many nodes as its tasks need, as Slurm spreads it.

Slurm puts a job whose owner fixed no node count on as many nodes as its tasks need: on 16-CPU
nodes `sbatch -n 32 --gres=gpu:2` ran on 2 nodes with 2 GPUs each, and `-n 16 --ntasks-per-node=4
--gres=gpu:1` on 4 nodes with 1 each (tests/fixtures/slurm/tasks_spread_over_nodes.txt). Pinned to
fewer nodes, Slurm finds the job never runnable and holds it again, and it was placed again every
cycle. So such a job is planned on that many nodes, with its GPUs per node as asked (a per-job
count split evenly over them); a job whose owner's node count cannot hold its tasks is rejected
with what to change.
"""

from __future__ import annotations

from dataclasses import replace

from hivebatch.cells import ClusterSpec
from hivebatch.controller.decide.tasks import gpus_per_node
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmJob

Spread = tuple[JobRequest, str | None, str | None]  # (request, note when widened, why it can never run)


def nodes_for_tasks(sj: SlurmJob, most_cpus: int) -> tuple[int, str]:
    """The fewest nodes Slurm runs the job's tasks on, and why ("" when one does)."""
    need, why = 1, ""
    if most_cpus and sj.cpus_total > most_cpus:
        need = -(-sj.cpus_total // most_cpus)
        why = f"its {sj.cpus_total} CPUs need {need} nodes of at most {most_cpus} CPUs each"
    if sj.tasks_per_node and sj.tasks > sj.tasks_per_node:
        by_tasks = -(-sj.tasks // sj.tasks_per_node)
        if by_tasks > need:
            need = by_tasks
            why = f"its {sj.tasks} tasks, at most {sj.tasks_per_node} on a node (--ntasks-per-node), need {need} nodes"
    return need, why


def _even_split(gpus: int, lo: int, hi: int, gpn: int) -> int | None:
    """The fewest nodes from ``lo`` to ``hi`` that take ``gpus`` in equal shares of at most ``gpn``."""
    return next((n for n in range(lo, min(hi, gpus) + 1) if gpus % n == 0 and gpus // n <= gpn), None)


def _vc_nodes(spec: ClusterSpec, req: JobRequest) -> int:
    """How many nodes a job of the request can span: its VC's whole-node cells (an opportunistic
    job's, the cluster's nodes of its type)."""
    types = [req.gpu_type] if req.gpu_type else list(spec.gpu_types)
    if req.priority < 0:
        return sum(1 for n in spec.nodes if n.gpu_type in types)
    return max(spec.vc_whole_nodes(req.vc, t) for t in types)


def _widened(req: JobRequest, need: int, most: int, spec: ClusterSpec) -> JobRequest | str:
    """``req`` on ``need`` nodes or more (at most ``most``, 0: any), or what stops it, to follow its
    tasks' reason."""
    whole = _vc_nodes(spec, req)
    if need > whole:
        where = "the cluster" if req.priority < 0 else f"virtual cluster {req.vc}"
        also = "" if req.priority < 0 else ", or submit it with --qos=opportunistic to run on idle GPUs"
        return (
            f"a job on several nodes runs in whole-node cells, of which {where} has {whole}:"
            f" ask for fewer tasks or CPUs (-n, -c, --ntasks-per-node){also}"
        )
    if most and need > most:
        return f"it asks for at most {most} (-N): cancel it and submit it again with -N {need} or with fewer tasks or CPUs"
    if req.gpus_per_node:
        wide = replace(req, nodes=need, gpus=req.gpus_per_node * need)
    else:
        n = _even_split(req.gpus, need, min(most or whole, whole), gpus_per_node(spec, req.gpu_type))
        if n is None:
            return f"its {req.gpus} GPUs do not split evenly over them: ask for a GPU count per node (--gpus-per-node) instead"
        wide = replace(req, nodes=n, gpus_per_node=req.gpus // n)
    held = spec.vc_gpus(req.vc, req.gpu_type)
    if req.priority >= 0 and wide.gpus > held:
        return f"{wide.gpus} GPUs in all, and virtual cluster {req.vc} holds {held}: ask for fewer tasks or CPUs (-n, -c)"
    return wide


def spread_over_nodes(req: JobRequest, sj: SlurmJob, most_cpus: int, spec: ClusterSpec) -> Spread:
    """``req`` on the nodes its tasks need: unchanged when it has them, widened when its owner gave
    no node count or a range that allows it (a GPU count per node stays per node), else why not."""
    need, why = nodes_for_tasks(sj, most_cpus)
    now = req.nodes or (req.gpus // req.gpus_per_node if req.gpus_per_node else 1)
    if need <= now:
        return req, None, None
    wide = _widened(req, need, sj.max_nodes, spec)
    if isinstance(wide, str):
        return req, None, f"{why}, and {wide}"
    return (
        wide,
        f"runs on {wide.nodes} nodes with {wide.gpus_per_node} GPU(s) each: {why}, as Slurm spreads it",
        None,
    )
