"""``hq``: squeue with hivebatch's columns."""
