"""Where the fake Slurm starts a job: free GPUs and shards per node, typed GRES, and the lab's
preemption of opportunistic jobs (PreemptMode=REQUEUE)."""

from __future__ import annotations

from datetime import timedelta

from hivebatch.slurm.parse import split_gres
from hivebatch.slurm.types import FINISHED_STATES
from hivebatch.testing.fake_slurm.state import PREEMPTABLE_QOS, Job, State


def busy(state: State, skip_qos: str | None = None) -> tuple[dict[str, set[int]], dict[str, dict[int, int]]]:
    gpus: dict[str, set[int]] = {n: set() for n in state.nodes}
    shards: dict[str, dict[int, int]] = {n: {} for n in state.nodes}
    for j in state.jobs.values():
        if j.state == "RUNNING" and j.qos != skip_qos:
            for node, idx in j.gpus.items():
                gpus[node].update(idx)
            for node, sh in j.shards.items():
                for i, c in sh.items():
                    shards[node][i] = shards[node].get(i, 0) + c
    return gpus, shards


def fit(
    state: State, j: Job, node: str, gpus_busy: set[int], shards_busy: dict[int, int]
) -> tuple[list[int], dict[int, int]] | None:
    n = state.nodes[node]
    if (
        n.state != "IDLE"
        or not n.registered
        or not state.controller_up
        or _runs_into_reservation(state, j, node)
    ):
        return None
    want_gpus: list[int] = []
    want_shards: dict[int, int] = {}
    untyped = 0
    for name, gtype, count, _ in split_gres(",".join(g for g in (j.tres_per_node, j.kept_gres) if g)):
        idx = int(gtype[1:]) if gtype and gtype.startswith("g") and gtype[1:].isdigit() else None
        if name == "gpu":
            if idx is None:
                untyped += count
            elif count > 0 and idx not in want_gpus:
                want_gpus.append(idx)
        elif name == "shard" and idx is not None:
            want_shards[idx] = want_shards.get(idx, 0) + count
    for i in want_gpus:
        if i >= n.gpus or i in gpus_busy or shards_busy.get(i):
            return None
    for i, c in want_shards.items():
        if i >= n.gpus or i in gpus_busy or shards_busy.get(i, 0) + c > n.shards_per_gpu:
            return None
    free = [i for i in range(n.gpus) if i not in gpus_busy and not shards_busy.get(i) and i not in want_gpus]
    if untyped > len(free):
        return None
    return sorted(want_gpus + free[:untyped]), want_shards


def _gpus(j: Job) -> int:
    return sum(c for name, _t, c, _ in split_gres(j.tres_per_node) if name == "gpu") * max(j.num_nodes, 1)


def _over_user_gpu_limit(state: State, j: Job) -> bool:
    """The job's QOS caps its user's GPUs in running jobs (recorded: tests/fixtures/slurm/qos_user_gpu_limit.txt)."""
    cap = state.qos_max_gpus_per_user.get(j.qos)
    if cap is None:
        return False
    held = sum(
        _gpus(o) for o in state.jobs.values() if o.state == "RUNNING" and o.user == j.user and o.qos == j.qos
    )
    return held + _gpus(j) > cap


def _runs_into_reservation(state: State, j: Job, node: str) -> bool:
    """Slurm starts a job that asks for no reservation on a reserved node only if its time limit ends
    before the reservation starts (recorded: tests/fixtures/slurm/reservation_time_limit.txt)."""
    now = state.now().replace(tzinfo=None)
    end = now + timedelta(seconds=j.time_limit_s) if j.time_limit_s else None
    return any(node in r.nodes and r.end > now and (end is None or r.start < end) for r in state.reservations)


def placement(
    state: State, j: Job, skip_qos: str | None = None
) -> dict[str, tuple[list[int], dict[int, int]]] | None:
    gpus_busy, shards_busy = busy(state, skip_qos)
    candidates = list(j.required_nodes) or list(state.nodes)
    chosen: dict[str, tuple[list[int], dict[int, int]]] = {}
    for node in candidates:
        room = fit(state, j, node, gpus_busy[node], shards_busy[node])
        if room is not None:
            chosen[node] = room
        elif j.required_nodes:
            break
        if len(chosen) == j.num_nodes:
            break
    if len(chosen) < j.num_nodes or (j.required_nodes and set(chosen) != set(j.required_nodes)):
        return None
    return chosen


def past_deadline(state: State, j: Job) -> bool:
    """slurmctld's deadline_ok on a job it schedules: ended as DEADLINE when its --time-min (or time
    limit) from now ends after its --deadline (recorded: tests/fixtures/slurm/deadline_held.txt)."""
    run_s = j.time_min_s or j.time_limit_s
    if j.deadline is None or not run_s or state.now() + timedelta(seconds=run_s) <= j.deadline:
        return False
    j.state, j.reason, j.exit_code = "DEADLINE", "DeadLine", "1:0"
    j.start_time = j.end_time = state.now()
    return True


def site_kills_invalid_dep(state: State) -> bool:
    """slurm.conf DependencyParameters, as slurmctld reads it (kill_invalid_depend_site.txt)."""
    return "kill_invalid_depend" in state.dependency_params.lower()


def _kills_on_invalid_dep(state: State, j: Job) -> bool:
    return j.kill_invalid_dep if j.kill_invalid_dep is not None else site_kills_invalid_dep(state)


def try_start(state: State, j: Job) -> bool:
    if j.required_nodes and len(j.required_nodes) > j.num_nodes:
        j.reason = "BadConstraints"
        return False
    if set(j.required_nodes) & j.never_on:
        # slurmctld's schedule() holds a job it can never run where it is pinned
        # (tests/fixtures/slurm/bad_constraints_held.txt)
        j.reason, j.held_by_slurm = "BadConstraints", True
        return False
    if _kills_on_invalid_dep(state, j) and dependency_status(state, j) == "failed":
        # job_independent tests the dependency before the begin time (kill_invalid_dep.txt)
        j.state, j.reason, j.exit_code = "CANCELLED", "DependencyNeverSatisfied", "0:0"
        j.end_time = state.now()
        return False
    if j.eligible_at and j.eligible_at > state.now():
        j.reason = "BeginTime"
        return False
    if state.partitions["gpu"] in ("DOWN", "INACTIVE"):  # every job here is in the lab's one partition
        j.reason = "PartitionDown" if state.partitions["gpu"] == "DOWN" else "PartitionInactive"
        return False
    if _over_user_gpu_limit(state, j):
        j.reason = "QOSMaxGRESPerUser"
        return False
    status = dependency_status(state, j)
    if status == "fulfilled" and past_deadline(state, j):
        return False
    if status != "fulfilled":
        j.reason = "Dependency" if status == "unfulfilled" else "DependencyNeverSatisfied"
        return False
    if j.array_max and j.array_job_id is not None:
        running = sum(
            1 for o in state.jobs.values() if o.array_job_id == j.array_job_id and o.state == "RUNNING"
        )
        if running >= j.array_max:
            j.reason = "JobArrayTaskLimit"
            return False
    chosen = placement(state, j)
    if chosen is None and j.qos != PREEMPTABLE_QOS:
        # preempt/qos with PreemptMode=REQUEUE: opportunistic jobs in the way go back to the queue, at
        # once or when their QOS's GraceTime ends (FakeSlurm.advance)
        chosen = placement(state, j, skip_qos=PREEMPTABLE_QOS)
        if chosen is not None and not requeue_in_the_way(state, chosen):
            chosen = None
    if chosen is None:
        j.reason = "Resources"
        return False
    j.state, j.reason = "RUNNING", "None"
    if len(j.array_pending) == 1:  # a record of one task runs as that task (array_single_task.txt)
        j.array_task_id = j.array_pending.pop()
    j.nodes = list(chosen)
    j.gpus = {n: g for n, (g, _) in chosen.items() if g}
    j.shards = {n: s for n, (_, s) in chosen.items() if s}
    j.start_time = state.now()
    return True


def requeue_in_the_way(state: State, chosen: dict[str, tuple[list[int], dict[int, int]]]) -> bool:
    """Preempt the opportunistic jobs on ``chosen``'s GPUs: requeued now, or given their QOS's GraceTime
    first (preempt_grace.txt). True when none is left in the way."""
    cleared = True
    for other in state.jobs.values():
        if other.state != "RUNNING" or other.qos != PREEMPTABLE_QOS:
            continue
        clash = any(
            set(other.gpus.get(node, [])) & (set(g) | set(s))
            or set(other.shards.get(node, {})) & (set(g) | set(s))
            for node, (g, s) in chosen.items()
        )
        if not clash:
            continue
        grace = state.qos_grace.get(other.qos, 0)
        if not grace:
            other.requeue(state.now(), "BeginTime")
            continue
        if other.preempt_time is None:
            other.start_grace(state.now(), grace)
        cleared = False
    return cleared


def dependency_status(state: State, j: Job) -> str:
    """fulfilled | unfulfilled | failed, for afterok/afterany and singleton on jobs of this fake (as Slurm
    judges them)."""
    dependency = j.dependency
    if not dependency:
        return "fulfilled"
    if dependency == "singleton":
        return singleton_status(state, j)
    kind, _, ids = dependency.partition(":")
    others = [state.jobs.get(int(i)) for i in ids.split(":") if i.isdigit()]
    if any(o is None or o.state not in FINISHED_STATES for o in others):
        return "unfulfilled"
    if kind == "afterok" and any(o is not None and o.state != "COMPLETED" for o in others):
        return "failed"
    return "fulfilled"


def singleton_status(state: State, j: Job, held_too: bool = False) -> str:
    """slurmctld's _find_singleton_job: unfulfilled while another job of the user and name runs, or waits
    submitted first; an array's tasks split off are jobs of their own to it (singleton_array.txt). It
    tests at submission and when it schedules, never a held job (whose state stays as last tested), and
    drops a dependency it found met."""
    if j.held and not held_too:
        return "unfulfilled"
    for o in state.jobs.values():
        if o is j or (o.user, o.name) != (j.user, j.name):
            continue
        if o.state == "RUNNING" or (o.state == "PENDING" and o.job_id < j.job_id):
            return "unfulfilled"
    j.dependency = ""
    return "fulfilled"
