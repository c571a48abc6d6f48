"""Non-negative least squares (Lawson & Hanson, "Solving Least Squares Problems", 1974, ch. 23).

The performance model's coefficients are times and must not be negative; this solves
min ‖A·x − b‖ subject to x ≥ 0 with numpy alone, so the fit needs no extra dependency.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from hivebatch.errors import HivebatchError

Array = NDArray[np.float64]


def nnls(a: Array, b: Array) -> Array:
    """x ≥ 0 minimising ‖a·x − b‖₂ (active-set method; exact for full-column-rank passive sets)."""
    m, n = a.shape
    atb = a.T @ b
    ata = a.T @ a
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = (
        10
        * max(m, n)
        * np.finfo(float).eps
        * float(np.abs(a).max(initial=1.0))
        * max(float(np.abs(b).max(initial=1.0)), 1.0)
    )
    grad = atb - ata @ x
    # A coefficient whose gradient is only rounding noise can come back non-positive from the very
    # solve that admits it; it is then left at zero until x moves, instead of being admitted again
    # and again (the classic Lawson-Hanson cycle).
    blocked = np.zeros(n, dtype=bool)
    steps = 0
    while ((free := ~passive & ~blocked).any()) and (grad[free] > tol).any():
        entering = int(np.argmax(np.where(free, grad, -np.inf)))
        passive[entering] = True
        first = True
        while True:
            steps += 1
            if steps > 30 * (n + 1):
                raise HivebatchError("non-negative least squares did not converge")
            idx = np.flatnonzero(passive)
            trial = np.zeros(n)
            trial[idx] = np.linalg.lstsq(a[:, idx], b, rcond=None)[0]
            if first and trial[entering] <= 0:
                passive[entering] = False
                blocked[entering] = True
                break
            first = False
            if (trial[idx] > 0).all():
                x = trial
                blocked[:] = False
                break
            # step from x towards the trial solution until the first coefficient reaches zero
            neg = idx[trial[idx] <= 0]
            alpha = float(np.min(x[neg] / (x[neg] - trial[neg])))
            x = x + alpha * (trial - x)
            passive &= x > tol
            x[~passive] = 0.0
            blocked[:] = False
        grad = atb - ata @ x
    return x
