"""The node × GPU map: ledger slots, Slurm's live view on top, fragmentation by cell level."""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import dataclass, field
from pathlib import Path

from report_scenario import config_data, make_db
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from hivebatch.reports.gpumap import GpuSlot, NodeLayout, build_cluster_map
from hivebatch.reports.mapview import map_dict, print_map
from hivebatch.reports.source import load_slots
from hivebatch.reports.topology import node_layouts

LEVELS = [("V100", 1), ("V100-SWITCH", 2), ("V100-SOCKET", 4), ("V100-NODE", 8)]


@dataclass
class LiveNode:
    name: str
    state: str = "IDLE"
    bad: bool = False
    gpu_indices: list[int] = field(default_factory=lambda: list(range(8)))
    gpus_used: list[int] = field(default_factory=list)
    gpus_shared: list[int] = field(default_factory=list)


def test_scenario_map_and_fragmentation(tmp_path: Path) -> None:
    engine = create_engine(make_db(tmp_path / "ledger.db"))
    with Session(engine) as session:
        slots, taken = load_slots(session)
    engine.dispose()
    assert taken is not None and taken.hour == 10
    cmap = build_cluster_map(node_layouts(config_data()), slots, job_users={"110": "bob", "106": "bob"})
    assert [n.name for n in cmap.nodes] == ["node1", "node2", "node3", "node4"]
    assert cmap.counts() == {
        "free": 13,
        "guaranteed": 8,
        "opportunistic": 2,
        "foreign": 1,
        "shared": 0,
        "bad": 8,
    }
    node1 = cmap.nodes[0]
    assert (
        node1.slots[6].kind == "opportunistic"
        and node1.slots[6].job == "110"
        and node1.slots[6].user == "bob"
    )
    assert cmap.nodes[1].bad
    frag = cmap.fragmentation()
    # node1: 0–5 free (a socket + a switch), node4: 0–6 free (a socket + a switch + one GPU); no whole node free
    assert (frag.free_gpus, frag.free_nodes, frag.stranded_gpus, frag.largest_block) == (13, 0, 13, 7)
    assert frag.partly_used_nodes == [("node4", 7), ("node1", 6)]
    assert frag.free_cells == {"V100-SOCKET": 2, "V100-SWITCH": 2, "V100": 1}
    assert frag.bad_nodes == ["node2"]


def test_the_map_is_dated_by_the_controllers_last_cycle_not_its_last_change(tmp_path: Path) -> None:
    # seen on the lab: hadmin cluster said "as of 13:46" at 13:47 under a controller cycling every 2 s,
    # because a cycle rewrites only the GPUs that changed
    from hivebatch.db.models import CellSnapshot

    engine = create_engine(make_db(tmp_path / "ledger.db"))
    with Session(engine) as session:
        _slots, changed = load_slots(session)
        assert changed is not None
        snap = session.get(CellSnapshot, 1) or CellSnapshot(id=1, data={})
        snap.taken_at = changed.replace(tzinfo=None) + dt.timedelta(minutes=7)
        session.merge(snap)
        session.commit()
        _slots, taken = load_slots(session)
    engine.dispose()
    assert taken == changed + dt.timedelta(minutes=7)


def test_live_slurm_marks_bad_nodes_foreign_and_shared_gpus() -> None:
    layouts = [
        NodeLayout("n1", "V100", list(range(8)), LEVELS),
        NodeLayout("n2", "V100", list(range(8)), LEVELS),
    ]
    slots = [
        GpuSlot("n1", 0, kind="guaranteed", vc="cv", job="7"),
        GpuSlot("n1", 1, kind="guaranteed", vc="cv", job="8"),
    ]
    live = [
        LiveNode("n1", state="MIXED", gpus_used=[0, 3], gpus_shared=[5]),
        LiveNode("n2", state="DRAIN", bad=True),
        LiveNode("n9", gpu_indices=[0, 1]),
    ]
    cmap = build_cluster_map(layouts, slots, live)
    n1 = cmap.nodes[0]
    assert n1.slots[0].kind == "guaranteed"  # the ledger knows this one
    # job 8 ended after the controller's last cycle: Slurm shows GPU 1 idle, so it is free (and stale)
    assert n1.slots[1].free and n1.slots[1].stale and n1.slots[1].job is None and cmap.stale_gpus == 1
    assert n1.slots[3].kind == "foreign"  # Slurm runs something there hivebatch did not place
    assert n1.slots[5].shared == 1 and not n1.slots[5].free
    assert n1.free_gpus == 5  # GPUs 1 (stale), 2, 4, 6, 7
    assert cmap.counts()["shared"] == 1 and cmap.counts()["free"] == 5 + 2
    assert cmap.nodes[1].bad and all(s.bad for s in cmap.nodes[1].slots)
    assert cmap.nodes[2].name == "n9" and "not in config" in cmap.nodes[2].state
    frag = cmap.fragmentation()
    assert frag.free_nodes == 1  # n9, the unconfigured node, is still free hardware
    assert frag.bad_nodes == ["n2"]


def test_free_cells_count_the_highest_level_only() -> None:
    layouts = [NodeLayout("n1", "V100", list(range(8)), LEVELS)]
    cmap = build_cluster_map(layouts, [GpuSlot("n1", 7, kind="guaranteed", vc="cv", job="1")])
    # GPUs 0–3 form a free socket, 4–5 a switch, 6 a single GPU
    assert cmap.nodes[0].free_cells() == {"V100-SOCKET": 1, "V100-SWITCH": 1, "V100": 1}
    empty = build_cluster_map(layouts, [])
    assert empty.nodes[0].free_cells() == {"V100-NODE": 1}
    assert empty.fragmentation().summary() == (
        "8 GPUs free, 8 on 1 whole node; largest free block 8 GPUs on one node"
    )


def test_plain_map_when_piped_and_json() -> None:
    layouts = [NodeLayout("n1", "V100", list(range(8)), LEVELS)]
    cmap = build_cluster_map(
        layouts,
        [
            GpuSlot("n1", 0, kind="guaranteed", vc="cv", job="7"),
            GpuSlot("n1", 4, kind="opportunistic", vc="sys", job="9"),
        ],
    )
    out = io.StringIO()
    print_map(cmap, "Cluster GPUs", ["cv", "sys"], out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "Cluster GPUs"
    # labels padded to one width, so the columns line up from node to node
    assert lines[1] == "n1  cv:7   -      | -      -      || sys:9* -      | -      -       (6 free)"
    data = map_dict(cmap)
    assert data["counts"]["opportunistic"] == 1
    # GPU 0 and 4 busy: switches 2–3 and 6–7 stay whole, GPUs 1 and 5 are single
    assert data["fragmentation"]["free_cells"] == {"V100-SWITCH": 2, "V100": 2}


def test_terminal_map_has_colours_and_cell_separators() -> None:
    layouts = [
        NodeLayout("n1", "V100", list(range(8)), LEVELS),
        NodeLayout("n2", "V100", list(range(8)), LEVELS),
    ]
    cmap = build_cluster_map(
        layouts,
        [
            GpuSlot("n1", 0, kind="guaranteed", vc="cv", job="7"),
            GpuSlot("n2", 3, kind="opportunistic", vc="sys", job="9"),
        ],
        [LiveNode("n1"), LiveNode("n2", state="DRAIN", bad=True, gpus_used=[3])],
    )
    out = io.StringIO()
    print_map(cmap, "Cluster GPUs", ["cv", "sys"], out=out, terminal=True)
    text = out.getvalue()
    assert "\x1b[" in text  # ANSI colours
    assert "│" in text and "┃" in text  # switch and socket boundaries
    assert text.count("BAD") == 8 + 1  # n2's eight GPUs, and the legend
    assert "Bad nodes (no new work): n2." in text
