"""Job array index strings as Slurm writes them: ``--array=0-15:4%2`` and squeue's ``1-5%2``."""

from __future__ import annotations

from hivebatch.slurm.types import SlurmError


def array_tasks(text: str) -> tuple[list[int], int]:
    """``'0-7:2,9%3'`` → ([0, 2, 4, 6, 9], 3): the task indices in order and the ``%`` throttle (0: none)."""
    spec, _, limit = text.partition("%")
    tasks: list[int] = []
    for part in spec.split(","):
        rng, _, step = part.strip().partition(":")
        lo, _, hi = rng.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (step and not step.isdigit()) or step == "0":
            raise SlurmError(["sbatch"], 1, f"sbatch: error: Invalid job array specification: {text}")
        tasks.extend(range(int(lo), int(hi or lo) + 1, int(step or 1)))
    if limit and not limit.isdigit():
        raise SlurmError(["sbatch"], 1, f"sbatch: error: Invalid job array specification: {text}")
    return sorted(set(tasks)), int(limit or 0)


def array_text(tasks: list[int], limit: int = 0) -> str:
    """[1, 2, 3, 5] with limit 2 → ``'1-3,5%2'`` (squeue's form)."""
    parts: list[str] = []
    run: list[int] = []
    for t in sorted(tasks):
        if run and t == run[-1] + 1:
            run.append(t)
            continue
        if run:
            parts.append(_run_text(run))
        run = [t]
    if run:
        parts.append(_run_text(run))
    return ",".join(parts) + (f"%{limit}" if limit else "")


def _run_text(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"
