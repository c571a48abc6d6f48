"""Binpack choice of one GPU for a memory slice (the gpushare rule).

Filter the GPUs whose free memory is enough, then take the one with the **least** memory left that
still fits: big holes stay whole for big requests. Memory is checked per GPU, never per node: two
GPUs with 4069 MiB free each cannot hold one 8138 MiB slice.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def fitting(free_mib: Mapping[K, int], need_mib: int) -> list[K]:
    """The GPUs that can hold ``need_mib`` on their own."""
    return [k for k, free in free_mib.items() if free >= need_mib]


def choose_binpack(
    free_mib: Mapping[K, int],
    need_mib: int,
    tie_break: Callable[[K], object] | None = None,
) -> K | None:
    """The fitting GPU with the least free memory, or None when no single GPU fits.

    Ties go to ``tie_break(key)`` (smallest first), else to the first key in mapping order, so the
    answer is deterministic for a given input.
    """
    best: K | None = None
    best_rank: tuple[int, object, int] | None = None
    for pos, (key, free) in enumerate(free_mib.items()):
        if free < need_mib:
            continue
        rank = (free, tie_break(key) if tie_break else 0, pos)
        if best_rank is None or rank < best_rank:
            best, best_rank = key, rank
    return best


def node_fits(free_per_gpu: Iterable[int], need_mib: int) -> bool:
    """Whether a node can hold a slice: some single GPU must, the node's total does not matter."""
    return any(free >= need_mib for free in free_per_gpu)
