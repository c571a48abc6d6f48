"""``hq``: squeue-like view with VC, cells, predicted start and why pending (filled in by the hq module)."""
