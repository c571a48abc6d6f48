"""Every policy on a small queue whose answer is worked out by hand."""

from __future__ import annotations

import pytest
from qos_helpers import toy_profile

from hivebatch.errors import HivebatchError
from hivebatch.qos import POLICY_NAMES, Platform, Shape, Task, get_policy

P24 = Platform(max_nodes=2, gpus_per_node=4, theta=0.5, overhead_s=0.0)

# Plain jobs (duration = time limit); ECT e = a + c·limit:
#   A cv  normal a=0  2 GPUs  100 s   e = 200
#   B cv  prior  a=10 1 GPU   300 s   e = 310   (weight 4)
#   C nlp urgent a=20 1 GPU  1000 s   e = 20
#   D nlp normal a=5  4 GPUs   50 s   e = 105
QUEUE = [
    Task("A", "cv", "normal", 0, gpus=2, time_limit_s=100),
    Task("B", "cv", "prior", 10, gpus=1, time_limit_s=300, weight=4),
    Task("C", "nlp", "urgent", 20, gpus=1, time_limit_s=1000),
    Task("D", "nlp", "normal", 5, gpus=4, time_limit_s=50),
]


def order(
    name: str, now: float = 20, limits: dict[str, int] | None = None, tasks: list[Task] | None = None
) -> list[str]:
    return [p.task.job_id for p in get_policy(name).plan(tasks or QUEUE, now, P24, limits)]


def test_policy_names() -> None:
    assert POLICY_NAMES == (
        "qos",
        "fifo",
        "capacity",
        "minmin",
        "wfs",
        "tetris-perf",
        "tetris-cer",
        "qos-paper",
    )
    for n in POLICY_NAMES:
        assert get_policy(n).name == n
    with pytest.raises(HivebatchError, match="unknown policy"):
        get_policy("lottery")


def test_fifo_is_arrival_order_with_user_gpus() -> None:
    plans = get_policy("fifo").plan(QUEUE, 20, P24, None)
    assert [p.task.job_id for p in plans] == ["A", "D", "B", "C"]
    assert [p.shapes for p in plans] == [
        [Shape(1, 2), Shape(2, 1)],
        [Shape(1, 4), Shape(2, 2)],
        [Shape(1, 1)],
        [Shape(1, 1)],
    ]


def test_minmin_is_earliest_ect_first() -> None:
    assert order("minmin") == ["C", "D", "A", "B"]


def test_wfs_weighs_arrival_and_ect() -> None:
    # key = a + ½(e − a)/weight: A 100, B 10 + 150/4 = 47.5, C 20, D 55
    assert order("wfs") == ["C", "B", "D", "A"]


def test_capacity_takes_turns_by_share_of_vc_capacity() -> None:
    # cv cap 4, nlp cap 16. A (cv 0/4, earlier head) → D (nlp 0/16) → nlp 4/16 < cv 2/4 → C → B
    assert order("capacity", limits={"cv": 4, "nlp": 16}) == ["A", "D", "C", "B"]
    # equal caps: after A (cv 2/8) and D (nlp 4/8), cv has the smaller share → B, then C
    assert order("capacity", limits={"cv": 8, "nlp": 8}) == ["A", "D", "B", "C"]


def test_capacity_puts_tasks_over_their_vc_limit_last() -> None:
    plans = get_policy("capacity").plan(QUEUE, 20, P24, {"cv": 1, "nlp": 8})
    assert [p.task.job_id for p in plans] == ["D", "B", "C", "A"]
    assert plans[-1].shapes == [] and "VC cv limit 1 GPUs" in (plans[-1].reason or "")


def test_qos_orders_urgent_then_savable_by_slack_then_the_rest_by_arrival() -> None:
    # now 20: slack = e − (20 + limit): A 80, B −10, C −1000, D 35. C is urgent (ECT = arrival): first.
    # D and A can still meet their ECT (least slack first); B cannot and comes last.
    plans = get_policy("qos").plan(QUEUE, 20, P24, None)
    assert [p.task.job_id for p in plans] == ["C", "D", "A", "B"]
    assert [p.slack for p in plans] == [-1000, 35, 80, -10]


def test_qos_puts_hopeless_tasks_behind_savable_ones_but_keeps_their_arrival_order() -> None:
    late = [
        Task("late1", "cv", "normal", 0, gpus=1, time_limit_s=100),  # e = 200, slack at 500: -400
        Task("late2", "cv", "prior", 50, gpus=1, time_limit_s=100),  # e = 150, slack -450
        Task("fine", "cv", "normal", 400, gpus=1, time_limit_s=100),  # e = 600, slack 0
    ]
    assert order("qos", now=500, tasks=late) == ["fine", "late1", "late2"]
    assert order("qos-paper", now=500, tasks=late) == ["late2", "late1", "fine"]


def test_qos_paper_orders_plain_jobs_by_least_slack() -> None:
    # now 20: slack = e − (20 + limit): A 80, B −10, C −1000, D 35
    plans = get_policy("qos-paper").plan(QUEUE, 20, P24, None)
    assert [p.task.job_id for p in plans] == ["C", "B", "D", "A"]
    assert [p.slack for p in plans] == [-1000, -10, 35, 80]
    assert [p.meets_qos for p in plans] == [False, False, True, True]


# Model tasks on the toy profile, 2x2 platform (see test_qos_placement for the numbers):
#   1x1 PR 100 CER 200 Lat 40 · 1x2 PR 133 CER 178 Lat 30 · 2x1 PR 80 CER 80 Lat 50 · 2x2 PR 100 CER 67 Lat 40
P22 = Platform(max_nodes=2, gpus_per_node=2, theta=0.5, overhead_s=0.0)


def model_task(job: str, cls: str, arrival: float) -> Task:
    return Task(job, "cv", cls, arrival, model=toy_profile(), batch=40, iters=100)


MODEL_QUEUE = [model_task("N", "normal", 0), model_task("P", "prior", 0), model_task("U", "urgent", 5)]


def test_tetris_perf_takes_highest_throughput_shape() -> None:
    plans = get_policy("tetris-perf").plan(MODEL_QUEUE, 10, P22, None)
    assert [p.task.job_id for p in plans] == ["N", "P", "U"]  # arrival order
    assert plans[0].shapes == [Shape(1, 2), Shape(1, 1), Shape(2, 2), Shape(2, 1)]
    assert plans[0].predicted_latency_s == pytest.approx(30)


def test_tetris_cer_takes_highest_cer_shape_ignoring_qos() -> None:
    plans = get_policy("tetris-cer").plan(MODEL_QUEUE, 10, P22, None)
    assert [p.task.job_id for p in plans] == ["N", "P", "U"]
    assert plans[1].shapes[0] == Shape(1, 1)
    assert not plans[1].meets_qos  # prior: e = 40, 10 + 40 = 50 misses it; tetris-cer does not care


def test_qos_policy_on_model_tasks() -> None:
    # now 10: N e=80 → 1x1 (CER max, 50 ≤ 80) slack 30; P e=40 → only 1x2 meets (10+30) slack 0;
    # U e=5 → none meets → CER max 1x1, slack 5 − 50 = −45. Paper order (least slack first): U, P, N;
    # hivebatch's qos agrees here: U is urgent (ECT = arrival) and goes first, then P and N by slack.
    paper = get_policy("qos-paper").plan(MODEL_QUEUE, 10, P22, None)
    assert [p.task.job_id for p in paper] == ["U", "P", "N"]
    assert [p.shapes[0] for p in paper] == [Shape(1, 1), Shape(1, 2), Shape(1, 1)]
    assert [p.slack for p in paper] == pytest.approx([-45, 0, 30])
    assert [p.meets_qos for p in paper] == [False, True, True]
    plans = get_policy("qos").plan(MODEL_QUEUE, 10, P22, None)
    assert [p.task.job_id for p in plans] == ["U", "P", "N"]
    assert [p.shapes[0] for p in plans] == [Shape(1, 1), Shape(1, 2), Shape(1, 1)]


def test_vc_limit_restricts_model_shapes() -> None:
    plans = get_policy("qos").plan([model_task("P", "prior", 0)], 10, P22, {"cv": 1})
    assert plans[0].shapes == [Shape(1, 1)] and not plans[0].meets_qos


def test_baselines_use_one_gpu_when_none_requested() -> None:
    for name in ("fifo", "minmin", "wfs", "capacity"):
        plans = get_policy(name).plan(MODEL_QUEUE, 10, P22, None)
        assert all(p.shapes == [Shape(1, 1)] for p in plans), name


def test_every_policy_returns_every_task_once() -> None:
    tasks = QUEUE + [Task("Z", "sys", "normal", 1, gpus=16, time_limit_s=10)]
    for name in POLICY_NAMES:
        plans = get_policy(name).plan(tasks, 30, P24, {"cv": 8, "nlp": 8, "sys": 8})
        assert sorted(p.task.job_id for p in plans) == ["A", "B", "C", "D", "Z"], name
        assert plans[-1].task.job_id == "Z" and plans[-1].shapes == [], name
