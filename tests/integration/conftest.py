"""Fixtures of the lab integration tests (the shared lab ones are in tests/conftest.py)."""

from lab_controller import ctl  # noqa: F401  (the controller-on-the-lab fixture)
