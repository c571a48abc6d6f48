"""hivebatch: a Slurm batch front end for shared university GPU clusters."""

__version__ = "0.1.0"
