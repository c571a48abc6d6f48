"""``hsub``: sbatch-compatible submission through hivebatch (filled in by the hsub module)."""
