"""The CPUs and memory the round's placements take from each node (hivebatch.node_room): on the lab four
``-c 16`` GPU jobs were pinned to one 16-CPU node in one cycle and three waited while three nodes idled."""

from __future__ import annotations

from test_scheduler_backfill import InOrder, _alloc, _task

from hivebatch.node_room import NodeNeeds, NodeRoom
from hivebatch.qos import Platform
from hivebatch.scheduler import schedule_round

PLATFORM = Platform(max_nodes=2, gpus_per_node=8)


def _room() -> NodeRoom:
    return NodeRoom(cpus=16, cpus_free=16, mem_mb=64000, mem_free_mb=64000)


def test_a_room_fits_what_it_has_left_and_takes_it() -> None:
    room = _room()
    assert room.fits(NodeNeeds(16, 64000)) and not room.fits(NodeNeeds(17))
    room.take(NodeNeeds(8, 32000))
    assert (room.cpus_free, room.mem_free_mb) == (8, 32000)
    assert (
        room.fits(NodeNeeds(8, 32000)) and not room.fits(NodeNeeds(9)) and not room.fits(NodeNeeds(1, 32001))
    )
    assert not room.fits(NodeNeeds(whole_memory=True))  # --mem=0: all of it, and some is held
    room.take(NodeNeeds(9, 40000))
    assert (room.cpus_free, room.mem_free_mb) == (0, 0)  # never below nothing


def test_a_whole_memory_job_takes_all_of_it() -> None:
    room = _room()
    assert room.fits(NodeNeeds(1, whole_memory=True))
    room.take(NodeNeeds(1, whole_memory=True))
    assert room.mem_free_mb == 0 and not room.fits(NodeNeeds(1, 1))


def test_figures_slurm_did_not_report_are_not_checked() -> None:
    assert NodeRoom(cpus=0, cpus_free=0, mem_mb=0, mem_free_mb=0).fits(NodeNeeds(64, 10**6, True))


def _round(needs: NodeNeeds | None, rooms: dict[str, NodeRoom] | None) -> dict[str, dict[str, list[int]]]:
    alloc = _alloc(nodes=2)
    tasks = [_task(j, 1, 600) for j in ("a", "b", "c")]
    for t in tasks:
        t.node_needs = needs
    outs = schedule_round(tasks, 0.0, alloc, InOrder(), PLATFORM, rooms=rooms)
    return {o.job_id: o.placement for o in outs if o.result == "placed"}


def test_jobs_placed_in_one_round_do_not_share_a_node_they_do_not_fit_on_together() -> None:
    nodes = list(_alloc(nodes=2).tree.node_cell)
    rooms = {n: _room() for n in nodes}
    packed = _round(NodeNeeds(16), None)  # without rooms the cells pack them on one node
    assert len(packed) == 3 and len({n for p in packed.values() for n in p}) == 1
    placed = _round(NodeNeeds(16), rooms)
    assert sorted(next(iter(p)) for p in placed.values()) == sorted(nodes)  # one per node; the third waits
    assert rooms[nodes[0]].cpus_free == 16  # the caller's rooms are left as they were


def test_small_needs_still_share_a_node() -> None:
    nodes = list(_alloc(nodes=2).tree.node_cell)
    placed = _round(NodeNeeds(4, 16000), {n: _room() for n in nodes})
    assert len(placed) == 3 and len({n for p in placed.values() for n in p}) == 1
