"""Binding on its own: the top-down capacity count and the bind log's checkpoint and rollback."""

from __future__ import annotations

from test_cells_allocator import lab

from hivebatch.cells.binding import BindLog, feasible, try_bind
from hivebatch.cells.capacity import config_capacity, level_capacity


def test_level_capacity_splits_what_is_left_above() -> None:
    a = lab()  # 4 nodes; VCs: 3 nodes, 1 socket, 1 switch, 2 GPUs
    spec = a.spec
    # (level, available, needed), top-down: a node left over splits into 2 sockets, and so on
    assert config_capacity(spec)["V100"] == [(4, 4, 3), (3, 2, 1), (2, 2, 1), (1, 2, 2)]


def test_level_capacity_a_short_level_leaves_nothing_over() -> None:
    spec = lab().spec
    have = [0, 0, 0, 0, 1]  # one free node
    need = [0, 1, 0, 0, 2]  # two nodes and a GPU asked for
    assert list(level_capacity(spec, "V100", have, need)) == [(4, 1, 2), (3, 0, 0), (2, 0, 0), (1, 0, 1)]


def test_rollback_to_a_checkpoint_unbinds_only_what_came_after() -> None:
    a = lab()
    log = BindLog(a)
    notes: list[str] = []
    first = try_bind(a, "cv", "V100", 3, notes, log)  # cv's socket
    mark = log.checkpoint()
    second = try_bind(a, "cv", "V100", 4, notes, log)  # cv's node
    assert first is not None and second is not None and not notes
    assert a.vc_view("cv").cells["V100-NODE"].bound == 1
    log.rollback(mark)
    assert log.cells() == [first]
    assert first.bound_vc == "cv" and second.bound_vc is None
    assert a.free_cells()["V100"]["V100-NODE"] == 3  # the socket's node stays split
    log.rollback()
    assert log.cells() == [] and first.bound_vc is None
    assert a.free_cells()["V100"]["V100-NODE"] == 4 and feasible(a, "V100")


def test_rollback_keeps_a_cell_a_job_already_uses() -> None:
    a = lab()
    log = BindLog(a)
    cell = try_bind(a, "sys", "V100", 2, [], log)
    assert cell is not None
    a.set_job(cell.leaves[0], "j1", False)
    log.rollback()
    assert cell.bound_vc == "sys" and log.cells() == []
    a.set_job(cell.leaves[0], None, False)
    log.record(cell)
    log.rollback()
    assert cell.bound_vc is None
    a.check_invariants()
