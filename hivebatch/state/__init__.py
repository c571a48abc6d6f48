"""What readers see of the controller's state: the read-only ledger, the allocator as readers rebuild it,
the job states and how placements, times and slack are written.

The CLI, ``hsub --test-only`` and the reports read through this package; it never imports the CLI and
never writes anything.
"""
