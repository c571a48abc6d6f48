"""What a job on a GPU slice is told about its limit.

Slurm does not limit memory per shard, and hivebatch does not either: isolation is the application's,
as in gpushare. The job gets its limit as environment variables a framework can use directly:

* ``HIVEBATCH_GPU_MEM_MIB``      — the slice, in MiB (whole GiB: what Slurm's shards stand for)
* ``HIVEBATCH_GPU_MEM_FRACTION`` — the slice as a fraction of the GPU (``0.25``), for TensorFlow's
  ``per_process_gpu_memory_fraction`` or PyTorch's ``torch.cuda.set_per_process_memory_fraction``
* ``HIVEBATCH_GPU_TOTAL_MIB``    — the GPU's memory
* ``TF_FORCE_GPU_ALLOW_GROWTH=true`` — TensorFlow then allocates on demand instead of grabbing the GPU
* ``PYTORCH_CUDA_ALLOC_CONF``    — ``garbage_collection_threshold`` at the fraction, so PyTorch's caching
  allocator gives memory back before it reaches the limit
* ``XLA_PYTHON_CLIENT_MEM_FRACTION`` — the same fraction for JAX
"""

from __future__ import annotations

from hivebatch.sharing.memory import shard_rounded_mib


def _fraction(slice_mib: int, gpu_mem_mib: int) -> float:
    return min(1.0, slice_mib / gpu_mem_mib)


def job_environment(mem_mib: int, gpu_mem_mib: int) -> dict[str, str]:
    """The variables for a job with a slice of ``mem_mib`` (rounded up to whole shards) of a GPU of
    ``gpu_mem_mib``. Fractions are rounded down to 3 places so they never exceed the slice."""
    slice_mib = shard_rounded_mib(mem_mib)
    frac = int(_fraction(slice_mib, gpu_mem_mib) * 1000) / 1000
    text = f"{frac:.3f}"
    # the collector threshold must stay strictly between 0 and 1
    gc = min(0.99, max(0.01, frac))
    return {
        "HIVEBATCH_GPU_MEM_MIB": str(slice_mib),
        "HIVEBATCH_GPU_MEM_FRACTION": text,
        "HIVEBATCH_GPU_TOTAL_MIB": str(gpu_mem_mib),
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "PYTORCH_CUDA_ALLOC_CONF": f"garbage_collection_threshold:{gc:.2f}",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": text,
    }


def sbatch_export_arg(env: dict[str, str]) -> str:
    """``--export=ALL,K=V,...``: the user's environment plus the slice variables (values have no commas)."""
    for k, v in env.items():
        if "," in v or "=" in k:
            raise ValueError(f"environment value for {k} cannot be passed through --export")
    return "--export=ALL," + ",".join(f"{k}={v}" for k, v in sorted(env.items()))
