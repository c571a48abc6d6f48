"""Child Python processes whose Slurm is the tests' in-memory fake.

No setting selects the fake (a production config must never reach it), so a child process is given
it the same way the in-process tests are: by replacing ``hivebatch.slurm.get_backend`` before the
command runs.
"""

from __future__ import annotations

PRELUDE = (
    "import hivebatch.slurm\n"
    "from hivebatch.testing.fake_slurm import FakeSlurm\n"
    "hivebatch.slurm.get_backend = lambda name=None: FakeSlurm()\n"
)


def python_code(code: str) -> str:
    """``code`` to run with ``python -c`` on the fake Slurm."""
    return PRELUDE + code
