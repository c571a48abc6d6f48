"""Config parsing and validation of the cluster / virtual_clusters sections."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from hivebatch.cells import CellAllocator, InfeasibleConfigError, parse_cluster_config
from hivebatch.config import read_yaml
from hivebatch.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent.parent

BASE: dict[str, Any] = {
    "cluster": {
        "cell_types": {
            "V100": {"memory": "32G"},
            "V100-SWITCH": {"child": "V100", "count": 2},
            "V100-SOCKET": {"child": "V100-SWITCH", "count": 2},
            "V100-NODE": {"child": "V100-SOCKET", "count": 2, "node": True},
            "V100-RACK": {"child": "V100-NODE", "count": 2},
        },
        "physical_cells": [
            {"type": "V100-RACK", "nodes": ["n1", "n2"]},
            {"type": "V100-NODE", "nodes": ["n3"]},
        ],
    },
    "virtual_clusters": {"a": {"cells": {"V100-RACK": 1}}, "b": {"cells": {"V100-SOCKET": 1, "V100": 2}}},
}


def cfg(**patch: Any) -> dict[str, Any]:
    c = copy.deepcopy(BASE)
    for path, value in patch.items():
        node = c
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return c


def error_of(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_cluster_config(data)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_example_config_is_the_lab() -> None:
    spec = parse_cluster_config(read_yaml(ROOT / "etc" / "hivebatch.example.yaml"))
    assert [n.name for n in spec.nodes] == ["node1", "node2", "node3", "node4"]
    assert spec.gpu_types == ["V100"]
    assert spec.gpus_per_node("V100") == 8
    assert spec.gpu_memory_mib("V100") == 32 * 1024
    assert spec.nodes[0].gpu_indices == list(range(8))
    assert spec.nodes[0].socket_of == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    assert set(spec.vcs) >= {"cv", "nlp", "sys"}
    shapes = {tuple(sorted(v.cells)) for v in spec.vcs.values()}
    assert len(shapes) == len(spec.vcs)  # different shapes
    assert sum(spec.vc_gpus(v) for v in spec.vcs) <= 32
    data = read_yaml(ROOT / "etc" / "hivebatch.example.yaml")
    for section in ("database", "qos", "controller"):
        assert section in data
    CellAllocator(spec)


def test_paper_config() -> None:
    spec = parse_cluster_config(read_yaml(ROOT / "etc" / "paper-4x4.yaml"))
    assert len(spec.nodes) == 4
    assert all(len(n.gpu_indices) == 4 for n in spec.nodes)
    assert spec.nodes[0].socket_of == {0: 0, 1: 0, 2: 1, 3: 1}
    assert len(spec.vcs) >= 2


def test_spec_figures() -> None:
    spec = parse_cluster_config(BASE)
    assert spec.cell_types["V100-RACK"].nodes == 2
    assert spec.cell_types["V100-RACK"].gpus == 16
    assert spec.cell_types["V100-NODE"].is_node
    assert spec.vc_gpus("a") == 16 and spec.vc_gpus("b") == 6
    assert spec.vc_gpus("b", "V100") == 6 and spec.vc_gpus("b", "K80") == 0
    assert spec.total_gpus() == 24


def test_implicit_leaf_type() -> None:
    c = cfg()
    del c["cluster"]["cell_types"]["V100"]
    spec = parse_cluster_config(c)
    assert spec.gpu_types == ["V100"] and spec.gpu_memory_mib("V100") is None


def test_several_chains_in_config_order() -> None:
    c = cfg()
    c["cluster"]["cell_types"] = {
        "K80-NODE": {"child": "K80", "count": 4, "node": True},
        **c["cluster"]["cell_types"],
    }
    c["cluster"]["physical_cells"].append({"type": "K80-NODE", "nodes": ["k1", "k2"]})
    c["virtual_clusters"]["c"] = {"cells": {"K80-NODE": 2}}
    spec = parse_cluster_config(c)
    assert spec.gpu_types == ["K80", "V100"]
    assert [n.name for n in spec.nodes if n.gpu_type == "K80"] == ["k1", "k2"]
    assert spec.gpus_per_node("K80") == 4 and spec.gpus_per_node("V100") == 8


def test_custom_gpu_indices() -> None:
    c = cfg(
        cluster__physical_cells=[
            {"type": "V100-NODE", "nodes": ["n1"], "gpu_indices": [7, 6, 5, 4, 3, 2, 1, 0]}
        ]
    )
    c["virtual_clusters"] = {}
    spec = parse_cluster_config(c)
    assert spec.nodes[0].gpu_indices == [7, 6, 5, 4, 3, 2, 1, 0]
    assert spec.nodes[0].socket_of[7] == 0


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"cluster__cell_types__V100-SWITCH": {"child": "V10", "count": 2}}, "unknown child type V10"),
        (
            {"cluster__cell_types__V100-NODE": {"child": "V100-SOCKT", "count": 2, "node": True}},
            "did you mean V100-SOCKET",
        ),
        (
            {"cluster__cell_types__V100-SOCKET": {"child": "V100-SWITCH", "count": 2, "node": True}},
            "two node levels",
        ),
        ({"cluster__cell_types__V100-NODE": {"child": "V100-SOCKET", "count": 2}}, "has no node level"),
        (
            {"cluster__cell_types__V100-SWITCH": {"child": "V100", "count": 0}},
            "count must be a positive whole number",
        ),
        (
            {"cluster__cell_types__V100-SWITCH": {"child": "V100", "count": 2, "colour": 1}},
            "unknown key(s) colour",
        ),
        (
            {"cluster__physical_cells": [{"type": "V100-RACK", "nodes": ["n1"]}]},
            "spans 2 nodes but 1 are listed",
        ),
        (
            {
                "cluster__physical_cells": [
                    {"type": "V100-NODE", "nodes": ["n1"]},
                    {"type": "V100-NODE", "nodes": ["n1"]},
                ]
            },
            "node n1 is named twice",
        ),
        ({"cluster__physical_cells": [{"type": "V100-SOCKET", "nodes": ["n1"]}]}, "below the node level"),
        ({"cluster__physical_cells": [{"type": "V100-NOD", "nodes": ["n1"]}]}, "unknown cell type V100-NOD"),
        ({"cluster__physical_cells": [{"type": "V100-NODE"}]}, "nodes must be a list"),
        (
            {"virtual_clusters__b": {"cells": {"V100-SOCKETS": 1}}},
            "virtual cluster b: unknown cell type V100-SOCKETS",
        ),
        ({"virtual_clusters__b": {"cells": {"V100": -1}}}, "count must be a whole number >= 0"),
        ({"virtual_clusters__b": {"cell": {"V100": 1}}}, "virtual cluster b: expected"),
        ({"cluster__cell_types__V100": {"memory": "lots"}}, "expected a size like 32G"),
        ({"cluster__racks": 3}, "cluster: unknown key(s) racks"),
    ],
)
def test_invalid_configs_say_what_to_fix(patch: dict[str, Any], needle: str) -> None:
    assert needle in error_of(cfg(**patch))


def test_cycle_is_named() -> None:
    c = cfg()
    c["cluster"]["cell_types"] = {
        "A": {"child": "B", "count": 2},
        "B": {"child": "A", "count": 2, "node": True},
    }
    assert "cycle" in error_of(c)


def test_child_of_two_parents() -> None:
    c = cfg()
    c["cluster"]["cell_types"]["OTHER-NODE"] = {"child": "V100-SOCKET", "count": 2, "node": True}
    assert "child of both" in error_of(c)


def test_missing_cluster_section() -> None:
    assert "missing cluster" in error_of({"virtual_clusters": {}})


def test_infeasible_names_chain_level_needed_available() -> None:
    c = cfg(virtual_clusters={"a": {"cells": {"V100-RACK": 1}}, "b": {"cells": {"V100-NODE": 2}}})
    with pytest.raises(InfeasibleConfigError) as exc:
        parse_cluster_config(c)
    e = exc.value
    assert isinstance(e, ConfigError)
    assert (e.chain, e.level, e.cell_type, e.needed, e.available) == ("V100", 4, "V100-NODE", 2, 1)
    assert "chain V100" in str(e) and "level 4" in str(e) and "need 2" in str(e) and "only 1" in str(e)


def test_infeasible_counts_splits_of_higher_cells() -> None:
    # one spare node splits into 2 sockets = 4 switches: 5 switches do not fit, 4 do
    ok = cfg(virtual_clusters={"a": {"cells": {"V100-RACK": 1}}, "b": {"cells": {"V100-SWITCH": 4}}})
    parse_cluster_config(ok)
    bad = cfg(virtual_clusters={"a": {"cells": {"V100-RACK": 1}}, "b": {"cells": {"V100-SWITCH": 5}}})
    with pytest.raises(InfeasibleConfigError) as exc:
        parse_cluster_config(bad)
    assert (exc.value.level, exc.value.needed, exc.value.available) == (2, 5, 4)


def test_allocator_refuses_infeasible_spec() -> None:
    c = cfg(virtual_clusters={"a": {"cells": {"V100-RACK": 2}}})
    spec = parse_cluster_config(c, check_feasible=False)
    with pytest.raises(InfeasibleConfigError):
        CellAllocator(spec)


def test_node_ranges() -> None:
    c = cfg(
        cluster__physical_cells=[
            {"type": "V100-NODE", "nodes": ["gpu[01-03]", "x7"]},
            {"type": "V100-RACK", "nodes": ["r[1-2]"]},
        ]
    )
    spec = parse_cluster_config(c)
    assert [n.name for n in spec.nodes] == ["gpu01", "gpu02", "gpu03", "x7", "r1", "r2"]
    assert "bad range" in error_of(cfg(cluster__physical_cells=[{"type": "V100-NODE", "nodes": ["n[3-1]"]}]))
    assert "cannot read node list" in error_of(
        cfg(cluster__physical_cells=[{"type": "V100-NODE", "nodes": ["n[1-2"]}])
    )
