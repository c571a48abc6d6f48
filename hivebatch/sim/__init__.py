"""Trace-driven simulation on a virtual clock, on the same cell core, QoS policies and scheduling glue
the controller uses: workloads and trace importers, the event loop, quota-mode pool, metrics, plots."""
