"""The offline evaluator: the batch script of a profiling run and the reading of its results.

Interface of the user's script (documented in the README): it is started once per batch size as

    SCRIPT --batch-size B --iterations I          (also in the environment:
                                                    HIVEBATCH_BATCH_SIZE=B, HIVEBATCH_ITERATIONS=I)

runs I training iterations at batch size B on the one GPU it is given, and prints its measured
throughput on stdout as ``<number> samples/s`` (the last such line counts; a line holding only a
number is accepted too). A non-zero exit (e.g. out of memory at a large batch) drops that batch size.

The run directory keeps, per batch size, ``run-B.out``, ``run-B.err`` and ``run-B.rc``; the fitted
samples are also written there as ``placements-<gpu>.csv`` so ``hivebatch model fit`` can refit them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from hivebatch.errors import HivebatchError
from hivebatch.qos.fitting import Sample, fit_default, mape
from hivebatch.qos.perfmodel import DEFAULT_COEFFS, OVERLAP, Profile, Shape

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_RATE = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*samples\s*/\s*s", re.IGNORECASE)
_BARE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


def check_model_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise HivebatchError(f"model name {name!r}: use letters, digits, '_', '.', '-' (at most 64)")
    return name


def parse_batch_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise HivebatchError(
            f"--batch-sizes {text!r}: give integers separated by commas, e.g. 16,32,64,128"
        ) from None
    if len(sizes) < 2 or sizes[0] < 1:
        raise HivebatchError(f"--batch-sizes {text!r}: need two or more sizes >= 1")
    return sizes


def job_script(run_dir: Path, command: list[str], batch_sizes: list[int], iters: int, model: str) -> str:
    """Bash batch script running ``command`` once per batch size; every word is shell-quoted."""
    cmd = " ".join(shlex.quote(c) for c in command)
    sizes = " ".join(str(int(b)) for b in batch_sizes)
    return (
        "#!/bin/bash\n"
        f"# hivebatch profiling run of {shlex.quote(model)}: batch sizes {sizes}, {int(iters)} iterations each\n"
        "set -u\n"
        f"cd {shlex.quote(str(run_dir))} || exit 1\n"
        f"for b in {sizes}; do\n"
        f'  HIVEBATCH_BATCH_SIZE="$b" HIVEBATCH_ITERATIONS={int(iters)} {cmd} '
        f'--batch-size "$b" --iterations {int(iters)} >"run-$b.out" 2>"run-$b.err"\n'
        '  echo "$?" >"run-$b.rc"\n'
        "done\n"
    )


def command_for(script: Path, interpreter: str | None, executable: bool) -> list[str]:
    """How the job runs the user's script: with --interpreter, else itself when executable, else by suffix."""
    if interpreter:
        return [*shlex.split(interpreter), str(script)]
    if executable:
        return [str(script)]
    if script.suffix == ".py":
        return ["python3", str(script)]
    return ["bash", str(script)]


def sbatch_args(
    model: str,
    time_limit: str,
    run_dir: Path,
    account: str | None = None,
    qos: str | None = None,
    partition: str | None = None,
) -> list[str]:
    """sbatch options of a profiling job: one task on one GPU of one node, run and logged in ``run_dir``."""
    args = [
        "--job-name", f"hb-profile-{model}", "--nodes", "1", "--ntasks", "1", "--gres", "gpu:1",
        "--time", time_limit, "--chdir", str(run_dir), "--output", str(run_dir / "slurm-%j.out"),
    ]  # fmt: skip
    for flag, value in (("--account", account), ("--qos", qos), ("--partition", partition)):
        if value:
            args += [flag, value]
    return args


def parse_throughput(text: str) -> float | None:
    """The last ``N samples/s`` on stdout, else the last line that is just a number."""
    found: float | None = None
    for line in text.splitlines():
        m = _RATE.findall(line)
        if m:
            found = float(m[-1])
    if found is None:
        for line in text.splitlines():
            b = _BARE.match(line)
            if b:
                found = float(b.group(1))
    return found


@dataclass
class RunResult:
    samples: list[Sample]
    dropped: dict[int, str] = field(default_factory=dict)  # batch size -> why


def read_run(run_dir: Path, batch_sizes: list[int]) -> RunResult:
    """Samples (one GPU) from a finished run directory; failed or silent batch sizes are dropped with a reason."""
    out = RunResult([])
    for b in batch_sizes:
        rc_file, out_file = run_dir / f"run-{b}.rc", run_dir / f"run-{b}.out"
        if not rc_file.exists():
            out.dropped[b] = "did not run"
            continue
        rc = rc_file.read_text().strip()
        if rc != "0":
            err = (run_dir / f"run-{b}.err").read_text(errors="replace").strip().splitlines()
            out.dropped[b] = f"exit {rc}" + (f": {err[-1][:120]}" if err else "")
            continue
        rate = parse_throughput(out_file.read_text(errors="replace")) if out_file.exists() else None
        if rate is None or rate <= 0:
            out.dropped[b] = "printed no positive 'N samples/s' line"
            continue
        out.samples.append(Sample(Shape(1, 1), float(b), b / rate))
    return out


def samples_csv(samples: list[Sample]) -> str:
    lines = ["local_bsz,step_time,sync_time,placement"]
    lines += [f"{s.local_batch:g},{s.step_time:.9g},0,{str(s.shape.d_gpn) * s.shape.d_node}" for s in samples]
    return "\n".join(lines) + "\n"


def fit_single_gpu(
    name: str,
    gpu_type: str,
    samples: list[Sample],
    borrow: Profile | None,
    family: str | None = None,
    params_m: float | None = None,
) -> Profile:
    """Computation terms from one-GPU samples; communication terms from ``borrow`` (a similar model).

    A one-GPU run says nothing about synchronisation, so the placement-dependent terms come from
    the closest known profile; without one, multi-GPU predictions assume no communication cost.
    """
    if len(samples) < 2:
        raise HivebatchError(f"need throughput at two or more batch sizes to fit {name} (got {len(samples)})")
    columns = ("t0", "t_w", "t_sqrtw") if len(samples) >= 4 else ("t0", "t_w")
    coeffs = fit_default(samples, columns=columns)
    source = f"measured: {len(samples)} batch sizes on one {gpu_type}"
    if borrow is not None and borrow.form == "default":
        for k in DEFAULT_COEFFS:
            if k.startswith("s_"):
                coeffs[k] = borrow.coefficients[k]
        # a profile in the older additive form lends its terms in that form
        if borrow.physical:
            coeffs[OVERLAP] = borrow.coefficients[OVERLAP]
        else:
            coeffs.pop(OVERLAP, None)
        source += f"; communication terms from {borrow.name}/{borrow.gpu_type}"
    else:
        source += "; no communication terms (no similar profile)"
    prof = Profile(
        name=name,
        gpu_type=gpu_type,
        form="default",
        coefficients=coeffs,
        family=family or (borrow.family if borrow else None),
        params_m=params_m or (borrow.params_m if borrow else None),
        samples=len(samples),
        source=source,
    )
    prof.mape_train = round(mape(prof, samples), 3)
    batches = [s.local_batch for s in samples]
    prof.extra["local_batch_range"] = [min(batches), max(batches)]
    prof.extra["shapes_profiled"] = ["1x1"]
    return prof
