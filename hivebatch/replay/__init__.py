"""Replaying a trace slice into a live Slurm, with plain Slurm and through hivebatch (``hivebatch replay``)."""
