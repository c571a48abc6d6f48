"""ECT classes, cost, CER, candidate placements, the QoS filter with its fallback, slack."""

from __future__ import annotations

import math

import pytest
from qos_helpers import toy_profile

from hivebatch.errors import ConfigError, HivebatchError
from hivebatch.qos import (
    ClassCoefficients,
    Platform,
    Shape,
    Task,
    candidate_shapes,
    cer,
    choose_qos,
    cost,
    expected_completion,
    parse_qos_config,
    shapes_for_gpus,
    task_ect,
)

# Toy model, batch 40, 100 iterations, v = 0 (see qos_helpers.toy_profile):
#   1x1: T 0.4 → PR 100,   Lat 40     cost 1/4 + ½·½ = 0.5   CER 200
#   1x2: T 0.3 → PR 133.3, Lat 30     cost 2/4 + ½·½ = 0.75  CER 177.8
#   2x1: T 0.5 → PR 80,    Lat 50     cost 2/4 + ½·1 = 1.0   CER 80
#   2x2: T 0.4 → PR 100,   Lat 40     cost 4/4 + ½·1 = 1.5   CER 66.7
P22 = Platform(max_nodes=2, gpus_per_node=2, theta=0.5, overhead_s=0.0)


def toy_task(cls: str = "normal", arrival: float = 0.0, **kw: object) -> Task:
    return Task(
        job_id=kw.pop("job_id", "t"),
        vc="cv",
        cls=cls,
        arrival=arrival,
        model=toy_profile(),
        batch=40,
        iters=100,
        **kw,
    )  # type: ignore[arg-type]


def test_class_coefficients_defaults_and_config() -> None:
    c = ClassCoefficients()
    assert (c.of("urgent"), c.of("prior"), c.of("normal"), c.of("opportunistic")) == (0, 1, 2, 2)
    c = ClassCoefficients.from_mapping({"normal": 3, "prior": 1.5})
    assert (c.of("prior"), c.of("normal"), c.of("opportunistic")) == (1.5, 3, 3)
    with pytest.raises(HivebatchError, match="unknown QoS class"):
        c.of("vip")
    with pytest.raises(ConfigError, match="qos.classes.normal"):
        ClassCoefficients.from_mapping({"normal": -1})
    with pytest.raises(ConfigError, match="unknown class"):
        ClassCoefficients.from_mapping({"gold": 1})


def test_expected_completion_formula_9() -> None:
    c = ClassCoefficients()
    assert expected_completion(100, "urgent", 40, c) == 100
    assert expected_completion(100, "prior", 40, c) == 140
    assert expected_completion(100, "normal", 40, c) == 180
    assert task_ect(toy_task("normal", 5.0), P22) == 85.0


def test_cost_formula_10() -> None:
    p = Platform(max_nodes=4, gpus_per_node=8, theta=0.5)
    assert cost(Shape(1, 1), p) == pytest.approx(1 / 32 + 0.5 / 4)
    assert cost(Shape(2, 4), p) == pytest.approx(8 / 32 + 0.5 * 2 / 4)
    assert cost(Shape(1, 8), p) < cost(Shape(2, 4), p)  # concentrated is cheaper


def test_cer_formula_11() -> None:
    t = toy_task()
    assert cer(t, Shape(1, 1), P22) == pytest.approx(200)
    assert cer(t, Shape(1, 2), P22) == pytest.approx(400 / 3 / 0.75)
    assert cer(t, Shape(2, 1), P22) == pytest.approx(80)
    assert cer(t, Shape(2, 2), P22) == pytest.approx(100 / 1.5)


def test_candidates_limited_by_cluster_vc_and_batch() -> None:
    p = Platform(max_nodes=4, gpus_per_node=8)
    t = Task("a", "cv", "normal", 0, model=toy_profile(), batch=64, iters=10)
    assert len(candidate_shapes(t, p)) == 32
    limited = candidate_shapes(t, p, limit=4)
    assert sorted(limited) == sorted(Shape(d, g) for d in (1, 2, 3, 4) for g in (1, 2, 3, 4) if d * g <= 4)
    small = Task("b", "cv", "normal", 0, model=toy_profile(), batch=3, iters=10)
    assert sorted(candidate_shapes(small, p)) == [
        Shape(1, 1),
        Shape(1, 2),
        Shape(1, 3),
        Shape(2, 1),
        Shape(3, 1),
    ]
    assert candidate_shapes(t, p, limit=0) == []


def test_candidates_for_pinned_shape_and_plain_jobs() -> None:
    p = Platform(max_nodes=4, gpus_per_node=8)
    pinned = Task("a", "cv", "normal", 0, model=toy_profile(), batch=64, iters=10, shape=Shape(2, 2))
    assert candidate_shapes(pinned, p) == [Shape(2, 2)]
    too_big = Task("a", "cv", "normal", 0, shape=Shape(5, 1), time_limit_s=60)
    assert candidate_shapes(too_big, p) == []
    plain = Task("c", "cv", "normal", 0, gpus=16, time_limit_s=60)
    assert candidate_shapes(plain, p) == [Shape(2, 8), Shape(4, 4)]
    assert shapes_for_gpus(12, p) == [Shape(2, 6), Shape(3, 4), Shape(4, 3)]
    assert shapes_for_gpus(9, p) == [Shape(3, 3)]
    assert shapes_for_gpus(33, p) == []
    keep = Platform(max_nodes=4, gpus_per_node=8, respect_user_gpus=True)
    asked = Task("d", "cv", "normal", 0, model=toy_profile(), batch=64, iters=10, gpus=4)
    assert candidate_shapes(asked, keep) == [Shape(1, 4), Shape(2, 2), Shape(4, 1)]
    assert len(candidate_shapes(asked, p)) == 32


def test_qos_choice_meets_ect_with_max_cer() -> None:
    c = choose_qos(toy_task("normal"), now=0, platform=P22)  # e = 80: every shape meets it
    assert c.shapes == [Shape(1, 1), Shape(1, 2), Shape(2, 1), Shape(2, 2)]
    assert (c.meets_qos, c.latency_s, c.ect, c.slack) == (True, 40, 80, 40)


def test_qos_filter_excludes_late_shapes() -> None:
    # prior, arrived at 0, now 10: e = 40; only 1x2 finishes by then (10 + 30)
    c = choose_qos(toy_task("prior"), now=10, platform=P22)
    assert c.shapes[0] == Shape(1, 2)
    assert c.meets_qos and c.slack == pytest.approx(0)
    # the QoS-missing shapes follow, by CER
    assert c.shapes[1:] == [Shape(1, 1), Shape(2, 1), Shape(2, 2)]


def test_qos_fallback_when_nothing_meets_ect() -> None:
    c = choose_qos(toy_task("urgent"), now=0, platform=P22)  # e = 0: nothing can meet it
    assert c.shapes[0] == Shape(1, 1)  # CER-max over all
    assert not c.meets_qos and c.slack == pytest.approx(-40)


def test_qos_no_shape_gives_reason() -> None:
    t = Task("a", "cv", "normal", 0, gpus=8, time_limit_s=60)
    c = choose_qos(t, 0, P22, limit=None)
    assert c.shapes == [] and math.isinf(c.latency_s)
    assert c.reason == "no placement for 8 GPUs fits (cluster 2x2)"


def test_plain_task_latency_is_time_limit() -> None:
    t = Task("a", "cv", "prior", 100, gpus=2, time_limit_s=600)
    c = choose_qos(t, 150, P22)
    assert c.shapes == [Shape(1, 2), Shape(2, 1)]
    assert (c.latency_s, c.ect, c.slack) == (600, 700, -50)
    default = choose_qos(Task("b", "cv", "normal", 0), 0, P22)
    assert default.latency_s == P22.default_time_limit_s and default.shapes == [Shape(1, 1)]


def test_task_validation() -> None:
    with pytest.raises(HivebatchError, match="needs batch"):
        Task("a", "cv", "normal", 0, model=toy_profile(), batch=None, iters=10)
    with pytest.raises(HivebatchError, match="gpus must be"):
        Task("a", "cv", "normal", 0, gpus=0)
    with pytest.raises(HivebatchError):
        Platform(max_nodes=0, gpus_per_node=8)


def test_parse_qos_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    s = parse_qos_config(
        {"qos": {"classes": {"urgent": 0, "prior": 1, "normal": 2}, "theta": 0.25, "profiles": "p.json"}},
        tmp_path,
    )
    assert s.theta == 0.25 and s.startup_overhead_s == 30 and s.profiles == tmp_path / "p.json"
    assert parse_qos_config({}).profiles is None
    with pytest.raises(ConfigError, match="qos.theta"):
        parse_qos_config({"qos": {"theta": "lots"}})
    with pytest.raises(ConfigError, match="unknown key"):
        parse_qos_config({"qos": {"thetta": 1}})


def test_parse_keep_free_gpus() -> None:
    assert parse_qos_config({}).keep_free_gpus is None  # one node's GPUs
    assert parse_qos_config({"qos": {"keep_free_gpus": "node"}}).keep_free_gpus is None
    assert parse_qos_config({"qos": {"keep_free_gpus": 0}}).keep_free_gpus == 0
    assert parse_qos_config({"qos": {"keep_free_gpus": 6}}).keep_free_gpus == 6
    for bad in (-1, 2.5, "six", True, None):
        with pytest.raises(
            ConfigError, match="qos.keep_free_gpus: must be a whole number of GPUs >= 0, or node"
        ):
            parse_qos_config({"qos": {"keep_free_gpus": bad}})
    assert Platform(max_nodes=4, gpus_per_node=8).kept_free == 8
    assert Platform(max_nodes=4, gpus_per_node=8, keep_free_gpus=3).kept_free == 3
    with pytest.raises(HivebatchError, match="keep_free_gpus"):
        Platform(max_nodes=4, gpus_per_node=8, keep_free_gpus=-2)
