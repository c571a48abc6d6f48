"""The ledger's models: jobs with placements, the audit trail, VCs and cells, GPU usage."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from hivebatch.db import (
    JOB_STATES,
    Base,
    CellSnapshot,
    Event,
    GpuBinding,
    GpuUsage,
    Job,
    Profile,
    VCCell,
    VirtualCluster,
    utcnow,
)


@pytest.fixture()
def session() -> Session:
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        yield s


def test_job_round_trip_keeps_request_placement_and_times(session: Session) -> None:
    now = utcnow()
    job = Job(
        slurm_job_id=4242,
        user="alice",
        vc_name="cv",
        qos="prior",
        priority=1,
        request={"vc": "cv", "gpus": 2, "qos": "prior"},
        gpus=2,
        state="placed",
        placement={"node2": [3, 5]},
        gres="gpu:g3:1,gpu:g5:1",
        predicted_start=now,
        predicted_end=now + dt.timedelta(hours=1),
        slack_s=120.5,
    )
    session.add(job)
    session.commit()
    session.expunge_all()
    got = session.scalars(select(Job).where(Job.slurm_job_id == 4242)).one()
    assert got.placement == {"node2": [3, 5]}
    assert got.request["gpus"] == 2
    assert got.predicted_end - got.predicted_start == dt.timedelta(hours=1)
    assert got.gpu_hours_guaranteed == 0.0 and got.preemptions == 0 and got.foreign is False
    assert not got.opportunistic


def test_slurm_job_id_is_unique(session: Session) -> None:
    session.add_all([Job(slurm_job_id=1, gpus=1), Job(slurm_job_id=1, gpus=2)])
    with pytest.raises(IntegrityError):
        session.commit()


def test_events_link_to_their_job_in_order(session: Session) -> None:
    job = Job(slurm_job_id=9, gpus=1)
    session.add(job)
    session.flush()
    session.add_all(
        [
            Event(job_id=job.id, slurm_job_id=9, kind="submitted", message="alice asked for 1 GPU"),
            Event(
                job_id=job.id,
                slurm_job_id=9,
                kind="placed",
                message="on node1:[0]",
                data={"placement": {"node1": [0]}},
            ),
            Event(kind="node_bad", message="node3 is bad"),
        ]
    )
    session.commit()
    session.expunge_all()
    got = session.scalars(select(Job)).one()
    assert [e.kind for e in got.events] == ["submitted", "placed"]
    assert got.events[1].data == {"placement": {"node1": [0]}}


def test_vc_cells_cascade_with_their_vc(session: Session) -> None:
    vc = VirtualCluster(
        name="cv",
        gpus=12,
        cells=[VCCell(cell_type="V100-NODE", count=1), VCCell(cell_type="V100-SOCKET", count=1)],
    )
    session.add(vc)
    session.commit()
    assert {(c.cell_type, c.count) for c in session.get(VirtualCluster, "cv").cells} == {
        ("V100-NODE", 1),
        ("V100-SOCKET", 1),
    }
    session.delete(vc)
    session.commit()
    assert session.scalars(select(VCCell)).all() == []


def test_gpu_usage_is_unique_per_gpu_day_and_vc(session: Session) -> None:
    day = dt.date(2026, 1, 2)
    session.add(GpuUsage(node="node1", gpu_index=0, day=day, vc_name="cv", guaranteed_s=10.0))
    session.add(GpuUsage(node="node1", gpu_index=0, day=day, vc_name="", foreign_s=5.0))
    session.commit()
    session.add(GpuUsage(node="node1", gpu_index=0, day=day, vc_name="cv"))
    with pytest.raises(IntegrityError):
        session.commit()


def test_profiles_bindings_and_snapshot(session: Session) -> None:
    session.add(Profile(model="resnet50", gpu_type="V100", coefficients={"k0": 1.0}, family="resnet"))
    session.add(
        GpuBinding(
            node="node1", gpu_index=3, gpu_type="V100", vc_name="cv", slurm_job_id=5, kind="guaranteed"
        )
    )
    session.add(CellSnapshot(id=1, data={"jobs": {}}))
    session.commit()
    assert session.get(GpuBinding, ("node1", 3)).kind == "guaranteed"
    assert session.get(CellSnapshot, 1).data == {"jobs": {}}
    session.add(Profile(model="resnet50", gpu_type="V100", coefficients={}))
    with pytest.raises(IntegrityError):
        session.commit()


def test_state_machine_names() -> None:
    assert JOB_STATES[:3] == ("queued", "placed", "running")
    assert {"done", "failed", "preempted", "cancelled"} <= set(JOB_STATES)
