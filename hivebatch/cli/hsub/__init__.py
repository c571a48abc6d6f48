"""``hsub``: sbatch with hivebatch's options."""
