"""The simulator's prediction for a replay plan, and the side-by-side table of prediction and Slurm.

Plain Slurm is predicted by the simulator's quota mode (GrpTRES GPU counts, ``select/cons_tres``-like
placement), hivebatch by its cells mode with the controller's policy. The private-cluster baseline of
each VC is the simulator's (``hivebatch.sim.runner.private_queues``), for the replay as for the
prediction: excess wait = mean wait in the run − that baseline. The private cluster runs the mode's own
scheduler (for hivebatch: class ranking, notices and the controller's cycle), so the excess is what
sharing the cluster costs the VC.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hivebatch.controller.context import parse_settings
from hivebatch.errors import HivebatchError
from hivebatch.notice import parse_notice
from hivebatch.replay.measure import JobError
from hivebatch.replay.plan import Plan
from hivebatch.replay.spread import Spread
from hivebatch.sim import setup
from hivebatch.sim.engine import SimRun, Simulation
from hivebatch.sim.metrics import RunSummary, summarize
from hivebatch.sim.notice import SimNotice
from hivebatch.sim.runner import private_queues

#: replay mode -> the simulator's sharing mode that predicts it
SIM_MODES = {"plain": "quota", "hivebatch": "cells"}


@dataclass
class Prediction:
    mode: str
    policy: str
    run: SimRun
    private: dict[str, float]

    @property
    def summary(self) -> RunSummary:
        return summarize(self.run, self.private)


def predict(
    plan: Plan,
    data: dict[str, Any],
    config_dir: Path | None,
    mode: str,
    policy: str,
    cycle_s: float | None = None,
    requeue_delay_s: float = 0.0,
    start_latency_s: float = 0.0,
    phase_s: float = 0.0,
    baseline: bool = True,
) -> Prediction:
    """``cycle_s``: the controller's cycle in trace seconds; hivebatch decides only then (None: at every event),
    at ``phase_s`` + multiples of it.
    ``requeue_delay_s``: trace seconds before a job hivebatch preempted may start again (Slurm's requeue).
    ``start_latency_s``: trace seconds from the controller's release of a placed job to Slurm's start.
    ``baseline``: False skips the VCs' private-cluster runs (no excess figures) for a caller that needs
    only the shared run."""
    spec = setup.build_spec(data)
    exp = setup.build_experiment(spec, data, config_dir, plan.sim_jobs, [], private_baseline=True)
    # plain Slurm decides at every event, arrival order; the controller ranks by class, preempts with
    # notice and decides at its cycles (the shared run and the private baseline alike)
    notice, cycle, ranked, latency = None, None, False, 0.0
    if mode == "hivebatch":  # the controller's own reservations, fairshare, starvation bound and notices
        ctl = parse_settings(None, data)
        exp = replace(
            exp,
            backfill=ctl.backfill,
            starve_after_s=ctl.starve_after_s,
            fairshare_half_life_s=ctl.fairshare_half_life_s,
        )
        notice = SimNotice(
            notice_s=float(parse_notice(data).notice_s),
            requeue_delay_s=requeue_delay_s,
            keeps_indices=True,
            untyped_pins=ctl.untyped_gres,
        )
        cycle, ranked, latency = cycle_s, True, start_latency_s
    sim_mode = SIM_MODES[mode]
    private: dict[str, float] = {}
    if baseline:
        private = private_queues(
            exp,
            policy,
            None,
            sim_mode,
            class_priority=ranked,
            notice=notice,
            cycle_s=cycle,
            cycle_phase_s=phase_s if cycle is not None else 0.0,
            start_latency_s=latency,
        )
    run = Simulation(
        spec,
        plan.sim_jobs,
        policy,
        sim_mode,
        exp.runtime,
        exp.platform,
        opportunistic=False,
        notice=notice,
        backfill=exp.backfill,
        fairshare_half_life_s=exp.fairshare_half_life_s,
        starve_after_s=exp.starve_after_s,
        cycle_s=cycle,
        cycle_phase_s=phase_s if cycle is not None else 0.0,
        class_priority=ranked,
        start_latency_s=latency,
    ).run()
    return Prediction(mode, policy, run, private)


def phase_spread(
    plan: Plan,
    data: dict[str, Any],
    config_dir: Path | None,
    policy: str,
    timing: tuple[float, float, float],
    phases: int,
    first: Prediction | None = None,
) -> Spread:
    """hivebatch's mean wait predicted at cycle phases 0, cycle/phases, 2·cycle/phases, …; ``timing``:
    the cycle, the requeue delay and the start latency in trace seconds, as ``predict`` takes them;
    ``first``: the phase-0 prediction when the caller has it already."""
    cycle_s, requeue_s, latency_s = timing
    if phases < 1 or cycle_s <= 0:
        raise HivebatchError(f"a phase spread needs >= 1 phase and a cycle > 0 (got {phases}, {cycle_s:g} s)")
    waits = [] if first is None else [first.summary.avg_queue_s]
    for k in range(len(waits), phases):
        pred = predict(plan, data, config_dir, "hivebatch", policy, cycle_s, requeue_s, latency_s,
                       phase_s=cycle_s * k / phases, baseline=False)  # fmt: skip
        waits.append(pred.summary.avg_queue_s)
    return Spread(waits)


def relative_error(predicted: float, measured: float) -> float | None:
    """(predicted − measured) / measured; None when nothing was measured to compare with."""
    return (predicted - measured) / measured if measured > 0 else None


def comparison(
    results: dict[str, tuple[RunSummary | None, RunSummary]],
    interval_trace_s: float,
    job_errors: dict[str, JobError | None] | None = None,
    spreads: dict[str, Spread | None] | None = None,
) -> dict[str, Any]:
    """mode -> (Slurm's figures or None when not replayed, the simulator's) as one JSON-able object;
    ``job_errors``: mode -> the prediction's error job by job (``measure.job_error``); ``spreads``:
    mode -> the prediction over the controller's cycle phases (``spread.phase_spread``)."""
    out: dict[str, Any] = {"controller_interval_trace_s": interval_trace_s, "modes": {}, "vcs": {}}
    for mode, (real, sim) in results.items():
        real_vcs = real.vcs if real is not None else {}
        out["modes"][mode] = {
            "slurm": real.to_json() if real is not None else None,
            "sim": sim.to_json(),
            "worst_excess_queue_s": (
                max((e.get("excess_queue_s", 0.0) for e in real_vcs.values()), default=0.0) if real else None
            ),
            "mean_wait_error": relative_error(sim.avg_queue_s, real.avg_queue_s) if real else None,
            "job_error": (err.to_json() if (err := (job_errors or {}).get(mode)) is not None else None),
            "sim_phases": (
                sp.to_json(real.avg_queue_s if real else None) if (sp := (spreads or {}).get(mode)) else None
            ),
        }
        for vc in sorted(set(real_vcs) | set(sim.vcs)):
            row = out["vcs"].setdefault(vc, {})
            row[mode] = {"slurm": real_vcs.get(vc, {}), "sim": sim.vcs.get(vc, {})}
    out["vcs"] = dict(sorted(out["vcs"].items()))
    return out


def _min(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:+.1f}"


def _per_job(err: dict[str, Any]) -> str:
    vcs = ", ".join(f"{vc} {v / 60:.2f}" for vc, v in err["vcs"].items())
    return f"{err['mean_abs_s'] / 60:.2f} min mean absolute ({vcs}; {err['jobs']} jobs)"


def _phases(sp: dict[str, Any]) -> str:
    text = (
        f"mean wait {sp['mean_s'] / 60:.1f} min, {sp['min_s'] / 60:.1f} to {sp['max_s'] / 60:.1f} "
        f"over {sp['phases']} phases"
    )
    if sp.get("slurm_inside") is not None:
        text += f"; Slurm's {'inside' if sp['slurm_inside'] else 'outside'} that range"
    return text


def format_table(report: dict[str, Any]) -> str:
    """Tab-separated: per VC the excess wait (trace minutes), then per mode the overall figures."""
    modes = list(report["modes"])
    head = ["VC", "jobs"] + [f"{m} {side} excess min" for m in modes for side in ("slurm", "sim")]
    lines = ["\t".join(head)]
    for vc, row in report["vcs"].items():
        jobs = max(int(row[m]["sim"].get("jobs", 0)) for m in modes if m in row)
        cells = [
            _min(row.get(m, {}).get(side, {}).get("excess_queue_s"))
            for m in modes
            for side in ("slurm", "sim")
        ]
        lines.append("\t".join([vc, str(jobs), *cells]))
    lines.append("")
    lines.append("\t".join(["mode", "side", "completed", "mean wait min", "QoS rate", "worst VC excess min"]))
    for m, fig in report["modes"].items():
        for side in ("slurm", "sim"):
            s = fig[side]
            if s is None:
                continue
            worst = max((e.get("excess_queue_s", 0.0) for e in s["vcs"].values()), default=0.0)
            lines.append(
                "\t".join(
                    [m, side, f"{s['completed']}/{s['jobs']}", f"{s['avg_queue_s'] / 60:.1f}",
                     f"{100 * s['qos_rate']:.1f}%", _min(worst)]
                )
            )  # fmt: skip
        err = fig["mean_wait_error"]
        lines.append(f"{m}\tsim error on mean wait\t{'-' if err is None else f'{100 * err:+.1f}%'}")
        if fig.get("job_error") is not None:
            lines.append(f"{m}\tsim error per job\t{_per_job(fig['job_error'])}")
        if fig.get("sim_phases") is not None:
            lines.append(f"{m}\tsim over cycle phases\t{_phases(fig['sim_phases'])}")
    lines.append(f"(one controller interval = {report['controller_interval_trace_s'] / 60:.1f} trace min)")
    return "\n".join(lines)
