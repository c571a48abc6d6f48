"""Stand-ins for tests, the simulator and the benchmarks: imported by name, never chosen by a config.

Production code reaches Slurm only through ``hivebatch.slurm.get_backend()``, which knows nothing of
this package, so no setting or environment variable can make a controller drive an imaginary cluster.
"""
