"""Checking a request before any search: what is rejected outright, which chains to try, which shape.

Everything here raises :class:`Reject` (the request can never be placed as asked) and changes
nothing.
"""

from __future__ import annotations

from hivebatch.cells.state import CellState, Reject
from hivebatch.cells.types import OPPORTUNISTIC, Request


def validate(st: CellState, req: Request) -> list[str]:
    """The chains to try for the request, in order of preference."""
    if not isinstance(req.gpus, int) or req.gpus < 1:
        raise Reject(f"a job needs at least 1 GPU (asked for {req.gpus})")
    if req.vc not in st.vcs:
        raise Reject(f"unknown VC {req.vc} (known: {', '.join(st.vcs) or 'none'})")
    if req.job_id in st.placed:
        raise Reject(f"job {req.job_id} already holds GPUs; release it first or use a new job id")
    if req.priority < OPPORTUNISTIC:
        raise Reject(f"priority must be -1 (opportunistic) or >= 0 (guaranteed), not {req.priority}")
    if req.nodes is not None and (not isinstance(req.nodes, int) or req.nodes < 1):
        raise Reject(f"nodes must be a positive whole number (got {req.nodes})")
    if req.nodes is not None and req.gpus % req.nodes:
        raise Reject(f"{req.gpus} GPUs cannot be split evenly over {req.nodes} nodes")
    _check_within(st, req)
    return _chains(st, req)


def _check_within(st: CellState, req: Request) -> None:
    if req.within is None:
        return
    if req.within not in st.spec.cell_types:
        raise Reject(f"unknown cell type {req.within} for within (known: {', '.join(st.spec.cell_types)})")
    wchain = st.spec.cell_types[req.within].chain
    if req.gpu_type is not None and req.gpu_type != wchain:
        raise Reject(f"within {req.within} is a {wchain} cell but the job asks for GPU type {req.gpu_type}")


def _chains(st: CellState, req: Request) -> list[str]:
    if req.gpu_type is not None:
        if req.gpu_type not in st.spec.chains:
            raise Reject(f"unknown GPU type {req.gpu_type} (known: {', '.join(st.spec.chains)})")
        return [req.gpu_type]
    if req.within is not None:
        return [st.spec.cell_types[req.within].chain]
    mine = st.spec.vc_chains(req.vc)
    if req.priority < 0:
        return mine + [c for c in st.spec.chains if c not in mine]
    if not mine:
        raise Reject(f"VC {req.vc} has no cells; it can only run opportunistic jobs (priority -1)")
    return mine


def shape(st: CellState, req: Request, chain: str) -> tuple[int, int]:
    """(nodes, GPUs per node) of the request on ``chain``: as asked, else the fewest nodes that work."""
    ch = st.spec.chains[chain]
    gpn = ch.gpus_per_node
    n_nodes = len(st.tree.nodes_of_chain[chain])
    if req.nodes is not None:
        n = req.nodes
    elif req.gpus <= gpn:
        n = 1
    else:
        n = next((k for k in range(-(-req.gpus // gpn), n_nodes + 1) if req.gpus % k == 0), 0)
        if not n:
            raise Reject(
                f"{req.gpus} {chain} GPUs cannot be split evenly over at most {n_nodes} nodes of {gpn} GPUs"
            )
    g = req.gpus // n
    if g > gpn:
        raise Reject(f"{g} GPUs per node is more than a {chain} node has ({gpn})")
    if n > n_nodes:
        raise Reject(f"the job needs {n} nodes but the cluster has only {n_nodes} {chain} nodes")
    if req.within is not None:
        wt = st.spec.cell_types[req.within]
        if wt.gpus < req.gpus or wt.nodes < n:
            raise Reject(
                f"the job ({n} node(s) x {g} GPUs) does not fit within one {req.within}, "
                f"which holds {wt.gpus} GPU(s) on {wt.nodes} node(s)"
            )
        if n > 1 and wt.level <= ch.node_level:
            raise Reject(f"a {n}-node job cannot fit within one {req.within} (one node or less)")
    return n, g


def min_level(st: CellState, chain: str, g: int) -> int:
    """The lowest level whose cells hold ``g`` GPUs (on one node)."""
    ch = st.spec.chains[chain]
    for lv in range(1, ch.node_level + 1):
        if st.spec.cell_types[ch.type_at(lv)].gpus >= g:
            return lv
    raise Reject(f"{g} GPUs do not fit one {chain} node")


def check_vc_can_hold(st: CellState, req: Request, chain: str, n: int, g: int) -> None:
    """Reject what the VC could not hold even when empty."""
    ch = st.spec.chains[chain]
    min_level(st, chain, g)  # rejects more GPUs than one node has
    # the same figures the job_submit plugin refuses by at submit (hivebatch.jobsubmit.site_table)
    if n == 1:
        if st.spec.vc_node_gpus(req.vc, chain) < g:
            raise Reject(
                f"VC {req.vc} has no {chain} cell that can hold {g} GPUs on one node (its cells: {st.cells_text(req.vc, chain)})"
            )
        return
    if req.within:
        v = st.vcs[req.vc]
        wl = st.spec.cell_types[req.within].level
        if not any(v.total[chain][lv] for lv in range(wl, ch.top_level + 1)):
            raise Reject(
                f"VC {req.vc} has no cell as large as {req.within} (its cells: {st.cells_text(req.vc, chain)})"
            )
    elif (node_room := st.spec.vc_whole_nodes(req.vc, chain)) < n:
        raise Reject(
            f"VC {req.vc} holds at most {node_room} whole {chain} node(s) but the job needs {n} nodes (its cells: {st.cells_text(req.vc, chain)})"
        )
