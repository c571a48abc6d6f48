"""The live replay's clock: submissions at their arrival times, controller cycles on a fixed period."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hivebatch.replay import live
from hivebatch.replay.plan import Plan, PlannedJob, SliceSpec
from hivebatch.sim.workload import SimJob

INTERVAL = 2.0
POLL_OVERSHOOT = 0.04  # a sleep lasts a little longer than asked, as on a busy machine
CYCLE = 0.3  # each controller cycle takes this long


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s + POLL_OVERSHOOT


class Submitter:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.at: list[float] = []

    def submit(self, _script: str, _args: list[str]) -> int:
        self.at.append(self.clock.now)
        return 100 + len(self.at)


def _plan(ats: list[float]) -> Plan:
    jobs = [
        PlannedJob(
            SimJob(job_id=f"j{i}", vc="cv", cls="normal", arrival=at * 8, gpus=1, duration_s=80.0),
            at,
            10,
            1,
            1,
        )
        for i, at in enumerate(ats)
    ]
    return Plan(jobs, SliceSpec(speedup=8.0))


def _run(
    monkeypatch: pytest.MonkeyPatch, ats: list[float], cycle_s: float, until: float
) -> tuple[list[float], list[float]]:
    clock = FakeClock()
    t0 = clock.now
    monkeypatch.setattr(live, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    # every job has ended once the clock passes ``until``
    watch = SimpleNamespace(
        list_jobs=lambda ids: [
            SimpleNamespace(state="COMPLETED" if clock.now - t0 > until else "RUNNING") for _ in ids
        ]
    )
    monkeypatch.setattr(live, "CliBackend", lambda: watch)
    sub = Submitter(clock)
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(clock.now - t0)
        clock.now += cycle_s

    settings = live.LiveSettings(operator="hbctl", users={}, classes=["normal"], interval_s=INTERVAL)
    live.run_plan(_plan(ats), "hivebatch", lambda p: (sub, "cv"), settings, set(), tick)
    return ticks, [t - t0 for t in sub.at]


def test_cycles_keep_their_period_whatever_the_polling_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks, submitted = _run(monkeypatch, [0.5, 3.3, 7.7], CYCLE, until=60.0)
    # each cycle starts within one sleep's overshoot of its slot: the delays do not add up
    assert len(ticks) >= 25
    for k, t in enumerate(ticks):
        assert k * INTERVAL <= t <= k * INTERVAL + POLL_OVERSHOOT + 1e-9, (k, t)
    period = (ticks[-1] - ticks[0]) / (len(ticks) - 1)
    assert period == pytest.approx(INTERVAL, abs=0.01)
    # and each job goes in within one overshoot of its arrival
    assert [round(s - a, 6) <= POLL_OVERSHOOT for s, a in zip(submitted, [0.5, 3.3, 7.7], strict=True)] == [
        True
    ] * 3


def test_a_cycle_that_overran_is_followed_at_once_and_the_schedule_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks, _ = _run(monkeypatch, [0.05], 2.5, until=20.0)
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    # a 2.5 s cycle on a 2 s period: the next starts as it ends, not in a burst to catch up
    assert all(2.5 <= g <= 2.5 + POLL_OVERSHOOT + 1e-9 for g in gaps), gaps


def test_next_cycle_counts_from_the_slot_not_from_when_it_was_noticed() -> None:
    assert live.next_cycle(4.0, 2.0, 4.35) == 6.0
    assert live.next_cycle(4.0, 2.0, 6.8) == 6.8  # overran: at once
