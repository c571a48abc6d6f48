"""A job on as many nodes as its tasks need, as Slurm spreads it.

Slurm puts a job whose owner fixed no node count on as many nodes as its tasks need: on 16-CPU
nodes `sbatch -n 32 --gres=gpu:2` ran on 2 nodes with 2 GPUs each, `-n 16 --ntasks-per-node=4
--gres=gpu:1` on 4 nodes with 1 each, `--gpus=2 --cpus-per-gpu=12` on 2 nodes with a GPU and 12
CPUs each, and `-n 16 --mem-per-cpu=5000 --gres=gpu:1` on two 64000 MB nodes with 8 tasks and a GPU
each (tests/fixtures/slurm/tasks_spread_over_nodes.txt). Pinned to fewer nodes, Slurm finds the
job never runnable and holds it again, and it was placed again every cycle. So such a job is planned
on that many nodes, with its GPUs per node as asked (a per-job count split evenly over them, each
node's CPUs and memory per GPU following its share); a job whose owner's node count cannot hold its
tasks is rejected with what to change. `--spread-job` asks for as many nodes as the job may use: Slurm
put `-n 4 --gres=gpu:1 --spread-job` on 4 nodes with a GPU each (tests/fixtures/slurm/spread_job.txt);
here that is up to one node per task, its -N, and the nodes it can span in its cells.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hivebatch.cells import ClusterSpec
from hivebatch.controller.decide.partition_nodes import ANY_COUNT, NodeRange
from hivebatch.controller.decide.tasks import gpus_per_node
from hivebatch.request import JobRequest, plugin_extras
from hivebatch.slurm.types import SlurmJob

Spread = tuple[JobRequest, str | None, str | None]  # (request, note when widened, why it can never run)

# what its owner can ask for less of, by what spreads the job
FEWER_TASKS = "fewer tasks or CPUs (-n, -c, --ntasks-per-node)"
LESS_PER_GPU = "fewer CPUs or less memory per GPU (--cpus-per-gpu, --mem-per-gpu)"
LESS_PER_CPU = "fewer tasks or less memory per CPU (-n, --mem-per-cpu)"
OTHER_PARTITION = "another partition (-p)"


@dataclass(frozen=True)
class NodeSize:
    """The most CPUs and memory a node of a GPU type has, as Slurm reports them (0: unknown)."""

    cpus: int = 0
    mem_mb: int = 0


@dataclass(frozen=True)
class PerGpu:
    """The job's --cpus-per-gpu and --mem-per-gpu, which the job_submit plugin turned into per-node
    minimums for all its GPUs on one node (0: not asked)."""

    cpus: int = 0
    mem_mb: int = 0

    @classmethod
    def of(cls, extras: dict[str, Any]) -> PerGpu:
        return cls(int(extras.get("cpus_per_gpu") or 0), int(extras.get("mem_per_gpu_mb") or 0))

    def fit(self, node: NodeSize) -> int | None:
        """The most GPUs whose CPUs and memory one node holds (None: no per-GPU ask, or sizes unknown)."""
        caps = [
            have // each
            for have, each in ((node.cpus, self.cpus), (node.mem_mb, self.mem_mb))
            if have and each
        ]
        return min(caps) if caps else None

    def needs(self, sj: SlurmJob, gpus_on_node: int) -> SlurmJob:
        """``sj``'s per-node CPUs and memory for ``gpus_on_node`` GPUs, where it asked per GPU."""
        return replace(
            sj,
            cpus_per_node=self.cpus * gpus_on_node if self.cpus else sj.cpus_per_node,
            mem_per_node_mb=self.mem_mb * gpus_on_node if self.mem_mb else sj.mem_per_node_mb,
        )


def nodes_for_tasks(
    sj: SlurmJob, node: NodeSize, gpus: int = 0, per_gpu: PerGpu = PerGpu(), even_tasks: bool = False
) -> tuple[int, str, str]:
    """The fewest nodes Slurm runs the job on, why ("" when one does) and what to ask less of: its
    tasks' CPUs, ``--ntasks-per-node``, and the CPUs and memory of ``gpus`` GPUs asked per GPU. With
    ``even_tasks`` (the pin sets TasksPerNode) each node must hold the CPUs of its share of tasks."""
    need, why, fewer = 1, "", FEWER_TASKS
    if sj.overcommitted:
        sj = replace(sj, tasks=1, cpus_total=max(sj.cpus_per_node, 1), tasks_per_node=0)
    per_task_cpus = sj.cpus_total // sj.tasks if sj.tasks else 0
    # a task runs on one node: one larger than any node is never spread (-c 500 waits for ever under
    # plain Slurm; the node check says so)
    if node.cpus and sj.cpus_total > node.cpus and per_task_cpus <= node.cpus:
        need = -(-sj.cpus_total // node.cpus)
        why = f"its {sj.cpus_total} CPUs need {need} nodes of at most {node.cpus} CPUs each"
    if even_tasks and node.cpus and per_task_cpus and node.cpus >= per_task_cpus:
        # -n 5 -c 6 on 16-CPU nodes: 30 CPUs fit two nodes, but 3 tasks on each do not
        by_share = -(-sj.tasks // (node.cpus // per_task_cpus))
        if by_share > need:
            need = by_share
            why = f"its {sj.tasks} tasks of {per_task_cpus} CPUs need {need} nodes of at most {node.cpus} CPUs each"
    if sj.mem_per_cpu_mb and node.mem_mb and sj.tasks and not (node.cpus and per_task_cpus > node.cpus):
        # -n 16 --mem-per-cpu=5000: Slurm put 8 tasks on each of two 64000 MB nodes
        # (tests/fixtures/slurm/tasks_spread_over_nodes.txt)
        task_mem = max(per_task_cpus, 1) * sj.mem_per_cpu_mb
        per_node = node.mem_mb // task_mem
        by_mem = -(-sj.tasks // per_node) if per_node else 0
        if by_mem > need:
            need = by_mem
            why = f"its {sj.tasks} tasks of {task_mem} MB memory (--mem-per-cpu) need {need} nodes of at most {node.mem_mb} MB each"
            fewer = LESS_PER_CPU
    if sj.tasks_per_node and sj.tasks > sj.tasks_per_node:
        by_tasks = -(-sj.tasks // sj.tasks_per_node)
        if by_tasks > need:
            need = by_tasks
            why = f"its {sj.tasks} tasks, at most {sj.tasks_per_node} on a node (--ntasks-per-node), need {need} nodes"
    cap = per_gpu.fit(node)
    if gpus and cap and gpus > cap:
        by_gpu = -(-gpus // cap)
        if by_gpu > need:
            need = by_gpu
            why = f"the CPUs and memory it asks per GPU fit {cap} of its {gpus} GPUs on a node"
            fewer = LESS_PER_GPU
    return need, why, fewer


def _split(gpus: int, lo: int, hi: int, gpn: int, per_task: tuple[int, int] | None) -> tuple[int, int] | None:
    """(nodes, GPUs on each) from ``lo`` to ``hi`` nodes of at most ``gpn``, fewest GPUs and then nodes:
    ``gpus`` in equal shares rounded up, as the job_submit plugin runs `-N 2 --gpus=3` as 2 + 2, or
    with ``per_task`` (GPUs per task, tasks) whole tasks on each node, as Slurm spreads -n 3 over two
    nodes as 2 + 1 tasks."""
    best: tuple[int, int] | None = None
    for n in range(lo, hi + 1):
        per = per_task[0] * -(-per_task[1] // n) if per_task is not None else -(-gpus // n)
        if per <= gpn and (best is None or n * per < best[0] * best[1]):
            best = (n, per)
    return best


def _reach(req: JobRequest, spec: ClusterSpec) -> int:
    """How many nodes the job can span: its VC's whole-node cells, or every node of its type on idle GPUs."""
    return spec.node_reach(None if req.priority < 0 else req.vc, req.gpu_type)


def _widened(
    req: JobRequest,
    need: int,
    most: int,
    gpn: int,
    spec: ClusterSpec,
    per_task: tuple[int, int] | None,
    fewer: str = FEWER_TASKS,
    partition: NodeRange = ANY_COUNT,
) -> JobRequest | str:
    """``req`` on ``need`` nodes or more (at most ``most``, 0: any, and what its ``partition`` allows;
    at most ``gpn`` GPUs on each, whole tasks' with ``per_task``), or what stops it, to follow its
    reason (``fewer``: what its owner can ask less of)."""
    if partition.most and need > partition.most:
        return f"Slurm runs a job on at most {partition.most} there (partition {partition.most_where}): ask for {fewer}"
    whole = _reach(req, spec)
    if need > whole:
        where = "the cluster" if req.priority < 0 else f"virtual cluster {req.vc}"
        also = "" if req.priority < 0 else ", or submit it with --qos=opportunistic to run on idle GPUs"
        return (
            f"a job on several nodes runs in whole-node cells, of which {where} has {whole}:"
            f" ask for {fewer}{also}"
        )
    if most and need > most:
        return f"it asks for at most {most} (-N): cancel it and submit it again with -N {need} or with fewer tasks or CPUs"
    if req.gpus_per_node and per_task is None:
        wide = replace(req, nodes=need, gpus=req.gpus_per_node * need)
    else:
        widest = min(most or whole, whole)
        split = _split(req.gpus, need, widest, gpn, per_task)
        if split is None:
            return f"its {req.gpus} GPUs on at most {widest} nodes need more than the {gpn} a node holds for it: ask for fewer GPUs"
        wide = replace(req, nodes=split[0], gpus_per_node=split[1], gpus=split[0] * split[1])
    held = spec.vc_gpus(req.vc, req.gpu_type)
    if req.priority >= 0 and wide.gpus > held:
        return f"{wide.gpus} GPUs in all, and virtual cluster {req.vc} holds {held}: ask for {fewer}"
    return wide


def spread_over_nodes(
    req: JobRequest,
    sj: SlurmJob,
    node: NodeSize,
    spec: ClusterSpec,
    per_gpu: PerGpu = PerGpu(),
    gpus_per_task: int = 0,
    partition: NodeRange = ANY_COUNT,
) -> Spread:
    """``req`` on the nodes its tasks need, and at least as many as its ``partition`` runs a job on:
    unchanged when it has them, widened when its owner gave no node count or a range that allows it
    (a GPU count per node stays per node, GPUs per task stay with whole tasks), else why not."""
    per_job = not req.gpus_per_node
    per_task = (gpus_per_task, sj.tasks) if gpus_per_task and sj.tasks > 1 else None
    need, why, fewer = nodes_for_tasks(
        sj, node, req.gpus if per_job else 0, per_gpu, even_tasks=per_task is not None
    )
    if sj.spread_job:
        # as many nodes as the job may use: one per task, up to its -N and the nodes it can span here
        widest = min(sj.tasks or 1, sj.max_nodes or sj.tasks or 1, _reach(req, spec))
        if widest > need:
            need, why = widest, f"--spread-job puts its {sj.tasks} tasks on as many nodes as it may use"
            fewer = FEWER_TASKS
    if partition.fewest > need and (not sj.max_nodes or sj.max_nodes >= partition.fewest):
        need, why, fewer = partition.fewest, f"partition {partition.fewest_where}", OTHER_PARTITION
    now = req.nodes or (req.gpus // req.gpus_per_node if req.gpus_per_node else 1)
    if need <= now:
        return req, None, None
    gpn = min(gpus_per_node(spec, req.gpu_type), per_gpu.fit(node) or req.gpus)
    wide = _widened(req, need, sj.max_nodes, gpn, spec, per_task, fewer, partition)
    if isinstance(wide, str):
        return req, None, f"{why}, and {wide}"
    rounded = f" ({wide.gpus} in all for the {req.gpus} it asks: a job gets the same GPUs on every node here)"
    return (
        wide,
        f"runs on {wide.nodes} nodes with {wide.gpus_per_node} GPU(s) each{rounded if per_job and wide.gpus > req.gpus else ''}:"
        f" {why}, as Slurm spreads it",
        None,
    )


@dataclass(frozen=True)
class NodeShare:
    """What a pin sets besides GPUs where the job_submit plugin counted a job's asks for one node:
    MinCPUsNode and MinMemoryNode for its share of CPUs and memory asked per GPU, and TasksPerNode
    so that each node holds whole tasks of a job asking GPUs per task (None: leave as it is)."""

    cpus: int | None = None
    mem_mb: int | None = None
    tasks: int | None = None


def node_share(placement: dict[str, list[int]], sj: SlurmJob | None) -> NodeShare:
    """What the pin of ``sj`` to ``placement`` sets besides GPUs (the act step calls it as it pins)."""
    if sj is None or not placement:
        return NodeShare()
    extras = plugin_extras(sj)
    share = PerGpu.of(extras).needs(sj, len(next(iter(placement.values()))))  # placements are symmetric
    tasks = None
    if extras.get("gpus_per_task") and len(placement) > 1 and sj.tasks > 1:
        # Slurm fills the first node with tasks (-N 2 -n 16: 15 + 1), more than its GPUs serve
        tasks = -(-sj.tasks // len(placement))
    return NodeShare(
        share.cpus_per_node if share.cpus_per_node != sj.cpus_per_node else None,
        share.mem_per_node_mb if share.mem_per_node_mb != sj.mem_per_node_mb else None,
        tasks if tasks != sj.tasks_per_node else None,
    )
