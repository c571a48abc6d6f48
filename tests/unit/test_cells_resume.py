"""Where a requeued job resumes: its GPU indices, free, on its old nodes first (hivebatch.cells.resume)."""

from __future__ import annotations

from hivebatch.cells.resume import resume_nodes
from hivebatch.cells.types import GpuUse

FREE = GpuUse(vc=None, job=None, opportunistic=False, bad=False, foreign=False)


def _use(vc: str | None = None, job: str | None = None, bad: bool = False) -> GpuUse:
    return GpuUse(vc=vc, job=job, opportunistic=False, bad=bad, foreign=False)


def test_the_old_node_first_then_others_by_name_and_only_the_same_indices() -> None:
    gmap = {n: {i: FREE for i in range(4)} for n in ("node1", "node2", "node3")}
    assert resume_nodes(gmap, ["node3"], [2], "cv", 0, lambda n: True) == ["node3"]
    gmap["node3"][2] = _use("nlp", "j9")
    assert resume_nodes(gmap, ["node3"], [2], "cv", 0, lambda n: True) == ["node1"]
    # every node has GPU 2 busy, though GPUs 0, 1 and 3 are free: it waits
    gmap["node1"][2] = _use(job="j1")
    gmap["node2"][2] = _use(bad=True)
    assert resume_nodes(gmap, ["node3"], [2], "cv", 0, lambda n: True) is None


def test_cells_of_other_vcs_are_off_limits_and_opportunistic_work_keeps_off_every_cell() -> None:
    gmap = {"node1": {0: _use("nlp"), 1: _use("cv")}, "node2": {0: _use("cv"), 1: FREE}}
    assert resume_nodes(gmap, ["node1"], [0], "cv", 0, lambda n: True) == ["node2"]
    assert resume_nodes(gmap, ["node1"], [1], "cv", 0, lambda n: True) == ["node1"]
    assert resume_nodes(gmap, ["node1"], [1], "cv", -1, lambda n: True) == ["node2"]
    assert resume_nodes(gmap, ["node1", "node2"], [1], "cv", 0, lambda n: n != "node2") is None
