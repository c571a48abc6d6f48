"""PNG plots of simulation results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

from hivebatch.errors import HivebatchError
from hivebatch.sim.metrics import RunSummary


def _label(s: RunSummary, modes: set[str]) -> str:
    return s.policy if len(modes) == 1 else f"{s.policy} ({s.mode})"


def write_plots(results: list[RunSummary], out_dir: str | Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HivebatchError(f"cannot create plot directory {out}: {exc.strerror or exc}") from None
    written: list[Path] = []
    modes = {r.mode for r in results}
    labels = [_label(r, modes) for r in results]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(8, 1.2 * len(results) + 4), 4))
    ax1.bar(labels, [100 * r.qos_rate for r in results], color="tab:blue")
    ax1.set_ylabel("QoS rate (%)")
    ax1.set_title("Jobs finished by their expected completion time")
    ax2.bar(labels, [r.makespan_s / 3600 for r in results], color="tab:orange")
    ax2.set_ylabel("makespan (h)")
    ax2.set_title("Makespan")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    written.append(out / "qos-makespan.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r, label in zip(results, labels, strict=True):
        ts = r.completion_times
        if ts:
            ax.step(
                [t / 3600 for t in ts], [(i + 1) / r.jobs for i in range(len(ts))], where="post", label=label
            )
    ax.set_xlabel("time since first arrival (h)")
    ax.set_ylabel("fraction of jobs completed")
    ax.set_title("CDF of completions")
    ax.legend(fontsize="small")
    fig.tight_layout()
    written.append(out / "completions-cdf.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    for policy in dict.fromkeys(r.policy for r in results):
        rows = [r for r in results if r.policy == policy]
        vcs = sorted({vc for r in rows for vc, e in r.vcs.items() if "excess_queue_s" in e})
        if not vcs:
            continue
        fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(vcs) + 3), 4))
        width = 0.8 / len(rows)
        for k, r in enumerate(rows):
            xs = [i + (k - (len(rows) - 1) / 2) * width for i in range(len(vcs))]
            ys = [r.vcs.get(vc, {}).get("excess_queue_s", 0.0) / 60 for vc in vcs]
            ax.bar(xs, ys, width=width, label=r.mode)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(vcs)), vcs, rotation=45)
        ax.set_ylabel("excess queuing delay vs private (min)")
        ax.set_title(f"Sharing anomaly per VC ({policy})")
        ax.legend()
        fig.tight_layout()
        written.append(out / f"excess-queue-{policy}.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    return written
