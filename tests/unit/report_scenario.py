"""A scripted day on the lab cluster with outcomes worked out by hand, stored through the real models.

Window: T0 (2026-11-16 00:00 UTC) to T0 + 10 h. Cluster: the example config (cv 12 GPUs, nlp 16,
sys 4; 4 nodes × 8 = 32 GPUs). Times below are hours after T0.

cv (alice)    j1 normal 8 GPUs  submit 0   start 0.5  end 4.5   ECT 5    limit 8h   met
              j2 prior  4 GPUs  submit 1   start 1    end 3     ECT 2.5  limit 10h  missed
              j3 urgent 2 GPUs  submit 5   start 5.25 end 6.25  ECT 6.5  limit 10h  met, 2 nodes × 1 GPU
nlp (bob)     j4 normal 16 GPUs submit 0   start 0    end 8     ECT 9    limit 12h  met
              j5 normal 8 GPUs  submit 2   pending              ECT 7               missed (still waiting)
              j6 prior  8 GPUs  submit 8.5 start 8.5  running   ECT 12              not counted yet
              j10 opportunistic 2 GPUs submit 9 start 9 running
sys (carol)   j7 normal 1 GPU   submit 1   start 2    end 3     ECT 3    limit 1h   met (preempts j8 at 2)
              j8 opportunistic 4 GPUs submit 0: runs 0–2 (preempted), 3–6 done, limit 8h
              j9 opportunistic 2 GPUs submit 4: runs 4–5, 6–7, 8–9, each preempted; waiting again
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from hivebatch.cells import CellAllocator, parse_cluster_config
from hivebatch.db.models import Base, CellSnapshot, Event, GpuBinding, Job

T0 = dt.datetime(2026, 11, 16, 0, 0)
UNTIL_H = 10.0

CONFIG = """
cluster:
  cell_types:
    V100: {memory: 32G}
    V100-SWITCH: {child: V100, count: 2}
    V100-SOCKET: {child: V100-SWITCH, count: 2}
    V100-NODE: {child: V100-SOCKET, count: 2, node: true}
  physical_cells:
    - {type: V100-NODE, nodes: [node1]}
    - {type: V100-NODE, nodes: [node2]}
    - {type: V100-NODE, nodes: [node3]}
    - {type: V100-NODE, nodes: [node4]}
virtual_clusters:
  cv: {cells: {V100-NODE: 1, V100-SOCKET: 1}}
  nlp: {cells: {V100-NODE: 2}}
  sys: {cells: {V100-SWITCH: 1, V100: 2}}
database:
  url: sqlite:///hivebatch.db
"""


def at(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


def utc(hours: float) -> dt.datetime:
    return at(hours).replace(tzinfo=dt.UTC)


# id, user, vc, qos, gpus, placement, submit, runs [(start, end, preempted)], end state, ECT, limit h
JOBS: list[dict[str, Any]] = [
    dict(sid=101, user="alice", vc="cv", qos="normal", gpus=8, placement={"node1": list(range(8))},
         submit=0, runs=[(0.5, 4.5, False)], state="done", ect=5, limit=8),
    dict(sid=102, user="alice", vc="cv", qos="prior", gpus=4, placement={"node4": [0, 1, 2, 3]},
         submit=1, runs=[(1, 3, False)], state="done", ect=2.5, limit=10),
    dict(sid=103, user="alice", vc="cv", qos="urgent", gpus=2, placement={"node1": [0], "node4": [0]},
         submit=5, runs=[(5.25, 6.25, False)], state="done", ect=6.5, limit=10),
    dict(sid=104, user="bob", vc="nlp", qos="normal", gpus=16, placement={"node2": list(range(8)), "node3": list(range(8))},
         submit=0, runs=[(0, 8, False)], state="done", ect=9, limit=12),
    dict(sid=105, user="bob", vc="nlp", qos="normal", gpus=8, placement=None,
         submit=2, runs=[], state="queued", ect=7, limit=None,
         reason="VC nlp has 8 healthy GPUs free of 16 (node2 is bad); needs 8 after job 106"),
    dict(sid=106, user="bob", vc="nlp", qos="prior", gpus=8, placement={"node3": list(range(8))},
         submit=8.5, runs=[(8.5, None, False)], state="running", ect=12, limit=None),
    dict(sid=110, user="bob", vc="nlp", qos="opportunistic", gpus=2, placement={"node1": [6, 7]},
         submit=9, runs=[(9, None, False)], state="running", ect=None, limit=None),
    dict(sid=107, user="carol", vc="sys", qos="normal", gpus=1, placement={"node4": [6]},
         submit=1, runs=[(2, 3, False)], state="done", ect=3, limit=1),
    dict(sid=108, user="carol", vc="sys", qos="opportunistic", gpus=4, placement={"node4": [4, 5, 6, 7]},
         submit=0, runs=[(0, 2, True), (3, 6, False)], state="done", ect=None, limit=8),
    dict(sid=109, user="carol", vc="sys", qos="opportunistic", gpus=2, placement={"node4": [4, 5]},
         submit=4, runs=[(4, 5, True), (6, 7, True), (8, 9, True)], state="preempted", ect=None, limit=None,
         reason="opportunistic: waits for 2 idle GPUs"),
]  # fmt: skip


def write_config(directory: Path) -> Path:
    path = directory / "hivebatch.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def config_data() -> dict[str, Any]:
    data = yaml.safe_load(CONFIG)
    assert isinstance(data, dict)
    return data


def fill(session: Session, with_events: bool = True) -> None:
    """Store the scripted jobs, their audit trail and the GPU map at T0 + 10 h."""
    for spec in JOBS:
        runs = spec["runs"]
        lost = sum(spec["gpus"] * (e - s) for s, e, p in runs if p)
        booked = sum(spec["gpus"] * (e - s) for s, e, _p in runs if e is not None)
        opportunistic = spec["qos"] == "opportunistic"
        job = Job(
            slurm_job_id=spec["sid"],
            name=f"job{spec['sid']}",
            user=spec["user"],
            account=spec["vc"],
            vc_name=spec["vc"],
            qos=spec["qos"],
            priority=-1 if spec["qos"] == "opportunistic" else {"normal": 0, "prior": 1, "urgent": 2}[spec["qos"]],
            request={"vc": spec["vc"], "qos": spec["qos"], "gpus": spec["gpus"],
                     **({"time_limit_s": spec["limit"] * 3600} if spec["limit"] else {}),
                     **({"nodes": len(spec["placement"])} if spec["placement"] and len(spec["placement"]) > 1 else {})},
            gpus=spec["gpus"],
            gpu_type="V100",
            state=spec["state"],
            placement=spec["placement"],
            shape_nodes=len(spec["placement"]) if spec["placement"] else None,
            expected_completion=at(spec["ect"]) if spec["ect"] is not None else None,
            submit_time=at(spec["submit"]),
            start_time=at(runs[0][0]) if runs else None,
            segment_start=at(runs[-1][0]) if runs and runs[-1][1] is None else None,
            end_time=at(runs[-1][1]) if spec["state"] == "done" else None,
            preemptions=sum(1 for *_x, p in runs if p),
            reason=spec.get("reason"),
            gpu_hours_lost=lost,
            gpu_hours_guaranteed=0.0 if opportunistic else booked,
            gpu_hours_opportunistic=booked if opportunistic else 0.0,
            created_at=at(spec["submit"]),
        )  # fmt: skip
        session.add(job)
        session.flush()
        if not with_events:
            continue
        session.add(
            Event(
                time=at(spec["submit"]),
                job_id=job.id,
                slurm_job_id=job.slurm_job_id,
                kind="submitted",
                message=f"{spec['user']} asked for {spec['gpus']} GPU(s) in VC {spec['vc']} ({spec['qos']})",
            )
        )
        for start, end, preempted in runs:
            session.add(
                Event(
                    time=at(start),
                    job_id=job.id,
                    slurm_job_id=job.slurm_job_id,
                    kind="started",
                    message="running",
                )
            )
            if end is not None:
                kind = "preempted" if preempted else "finished"
                session.add(
                    Event(
                        time=at(end),
                        job_id=job.id,
                        slurm_job_id=job.slurm_job_id,
                        kind=kind,
                        message="preempted for the VC that owns the cells" if preempted else "done: exit 0",
                    )
                )
    session.add(
        Event(time=at(7.5), kind="node_bad", message="node node2 is bad (DRAIN): no new work goes there")
    )
    # The GPU map now: node1 GPUs 6,7 lent to bob's opportunistic job; node2 drained; node3 all nlp's j106;
    # node4 GPU 7 busy with work hivebatch did not place.
    for node in ("node1", "node2", "node3", "node4"):
        for idx in range(8):
            kind, vc, sid = "free", None, None
            if node == "node1" and idx >= 6:
                kind, vc, sid = "opportunistic", "nlp", 110
            elif node == "node3":
                kind, vc, sid = "guaranteed", "nlp", 106
            elif node == "node4" and idx == 7:
                kind = "foreign"
            session.add(GpuBinding(node=node, gpu_index=idx, gpu_type="V100", vc_name=vc, slurm_job_id=sid,
                                   kind=kind, bad=node == "node2", updated_at=at(UNTIL_H)))  # fmt: skip
    # The allocator's snapshot, as the controller stores it: the same jobs, the foreign GPU, node2 bad.
    alloc = CellAllocator(parse_cluster_config(config_data()))
    alloc.adopt("106", "nlp", 1, {"node3": list(range(8))})
    alloc.adopt("110", "nlp", -1, {"node1": [6, 7]})
    alloc.occupy_foreign("slurm:999@node4", "node4", [7])
    alloc.set_node_bad("node2")
    session.add(CellSnapshot(id=1, taken_at=at(UNTIL_H), data=alloc.snapshot()))
    session.commit()


def make_db(path: Path, with_events: bool = True) -> str:
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        fill(session, with_events=with_events)
    engine.dispose()
    return url


if (
    __name__ == "__main__"
):  # the example ledger docs/hadmin.md shows: python tests/unit/report_scenario.py DIR
    import sys

    where = Path(sys.argv[1])
    where.mkdir(parents=True, exist_ok=True)
    (where / "hivebatch.db").unlink(missing_ok=True)  # run again, it writes the same day, not a second one
    make_db(where / "hivebatch.db")
    print(write_config(where))
