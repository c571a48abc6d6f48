#!/bin/sh
# hivebatch's TaskProlog (slurm.conf TaskProlog=, run by slurmstepd before every task, the batch
# script included; a line "unset NAME" it prints removes NAME from the task's environment).
#
# Slurm 22.05 cannot pin a job to GPU indices and keep its --mem-per-gpu (an untyped per-GPU figure
# next to typed per-index GRES is refused), so hivebatch's job_submit.lua turns --mem-per-gpu into
# memory per node. slurmstepd then exports SLURM_MEM_PER_NODE beside the SLURM_MEM_PER_GPU sbatch
# copied into the job, and every srun in the job stops: "SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and
# SLURM_MEM_PER_NODE are mutually exclusive". Keeping the per-GPU figure lets a step ask memory by
# its GPUs, as under plain Slurm. Slurm alone never sets two of them, so this changes nothing else.
if [ -n "${SLURM_MEM_PER_GPU:-}" ]; then
  [ -n "${SLURM_MEM_PER_NODE:-}" ] && echo "unset SLURM_MEM_PER_NODE"
  [ -n "${SLURM_MEM_PER_CPU:-}" ] && echo "unset SLURM_MEM_PER_CPU"
fi
exit 0
