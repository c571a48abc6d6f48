"""hsub's submission logic: sbatch-style options, the job wrapper script, checks against the config.

Kept free of click, rich, SQLAlchemy and numpy on the ``--dry-run`` path so ``hsub`` starts about as
fast as ``sbatch``; the heavier parts (profiles, the database) are imported only when a job needs them.
"""
