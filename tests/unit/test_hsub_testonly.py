"""``hsub --test-only`` answers with the controller's own round on the current cell state (fake Slurm)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
import yaml

import hivebatch.slurm
from hivebatch.errors import HivebatchError
from hivebatch.request import JobRequest
from hivebatch.submit.build import gpu_ask_arguments, prepare
from hivebatch.submit.testonly import predict, render_prediction
from hivebatch.testing.fake_slurm import FakeSlurm
from hivebatch.testing.lua_job_submit import LuaJobSubmit

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, FakeSlurm]:
    config = tmp_path / "hivebatch.yaml"
    text = (PROJECT / "etc" / "hivebatch.example.yaml").read_text()
    config.write_text(text.replace("sqlite:///var/hivebatch.db", f"sqlite:///{tmp_path / 'none.db'}"))
    fake = FakeSlurm(
        accounts={"alice": ["cv"], "bob": ["nlp"], "carol": ["sys"]},
        operators=["hbctl"],
        job_submit=LuaJobSubmit(yaml.safe_load(text)),
    )
    monkeypatch.setattr(hivebatch.slurm, "get_backend", lambda *a, **k: fake)
    (tmp_path / "job.sh").write_text("#!/bin/sh\ntrue\n")
    return tmp_path, fake


def run_hivebatch_job(fake: FakeSlurm, user: str, req: JobRequest, node: str, gpus: list[int]) -> int:
    jid = fake.as_user(user).submit("#!/bin/sh\n", ["-A", req.vc, "-q", req.qos, *gpu_ask_arguments(req)])
    gres = ",".join(f"gpu:g{i}:1" for i in gpus)
    fake.as_user("hbctl").update_pending(jid, [node], 1, gres)
    fake.as_user("hbctl").release(jid)
    assert fake.job(jid).state == "RUNNING"
    return jid


def test_an_idle_cluster_places_the_job_now(site) -> None:  # type: ignore[no-untyped-def]
    tmp, _fake = site
    sub = prepare(["--config", str(tmp / "hivebatch.yaml"), "-A", "cv", "--gpus", "2", "-t", "30", str(tmp / "job.sh")],
                  environ={}, stdin_read=None)  # fmt: skip
    now = dt.datetime(2026, 1, 1, 12, 0)
    pred = predict(sub, now)
    assert pred.result == "placed"
    ((node, gpus),) = pred.placement.items()
    assert len(gpus) == 2 and node.startswith("node")
    assert pred.predicted_start == now
    assert pred.predicted_end is not None and pred.predicted_end > now
    assert "Slurm" in pred.source  # no controller snapshot yet: rebuilt from what Slurm runs
    text = render_prediction(sub, pred, now)
    assert (
        f"would start now on {node}:[{','.join(map(str, gpus))}]" in text and "nothing was submitted" in text
    )


def test_a_full_vc_makes_the_job_wait_with_a_reason(site) -> None:  # type: ignore[no-untyped-def]
    tmp, fake = site
    # carol's two jobs fill VC sys (a switch pair and two single GPUs)
    run_hivebatch_job(fake, "carol", JobRequest(vc="sys", gpus=2), "node1", [0, 1])
    run_hivebatch_job(fake, "carol", JobRequest(vc="sys", gpus=2), "node1", [2, 3])
    sub = prepare(["--config", str(tmp / "hivebatch.yaml"), "-A", "sys", "--gpus", "2", str(tmp / "job.sh")],
                  environ={}, stdin_read=None)  # fmt: skip
    pred = predict(sub)
    assert pred.result == "waiting", pred
    assert pred.reason and "sys" in pred.reason
    assert "would wait" in render_prediction(sub, pred)
    # another VC is not affected by sys being full
    other = prepare(["--config", str(tmp / "hivebatch.yaml"), "-A", "cv", "--gpus", "4", str(tmp / "job.sh")],
                    environ={}, stdin_read=None)  # fmt: skip
    placed = predict(other)
    assert placed.result == "placed"
    assert all(not (n == "node1" and set(g) & {0, 1, 2, 3}) for n, g in placed.placement.items())


def test_a_gpu_slice_is_binpacked_onto_the_gpu_a_running_slice_uses(site) -> None:  # type: ignore[no-untyped-def]
    tmp, fake = site
    req = JobRequest(vc="sys", gpus=1, gpu_mem_mib=20 * 1024)
    jid = fake.as_user("carol").submit("#!/bin/sh\n", ["-A", "sys", "-q", "normal", *gpu_ask_arguments(req)])
    fake.as_user("hbctl").update_pending(jid, ["node3"], 1, "shard:g5:20")
    fake.as_user("hbctl").release(jid)
    assert fake.job(jid).state == "RUNNING"
    now = dt.datetime(2026, 1, 1, 12, 0)
    fits = prepare(["--config", str(tmp / "hivebatch.yaml"), "-A", "sys", "--gpu-mem", "12G", str(tmp / "job.sh")],
                   environ={}, stdin_read=None)  # fmt: skip
    pred = predict(fits, now)
    assert (pred.result, pred.placement) == ("placed", {"node3": [5]})
    assert "would start now on node3:[5] 12G/32G" in render_prediction(fits, pred, now)
    too_big = prepare(["--config", str(tmp / "hivebatch.yaml"), "-A", "sys", "--gpu-mem", "13G", str(tmp / "job.sh")],
                      environ={}, stdin_read=None)  # fmt: skip
    assert predict(too_big, now).placement != {"node3": [5]}  # 20 + 13 > 32: another GPU


def test_a_job_that_would_run_into_a_reservation_everywhere_is_told_it_waits_for_its_end(site) -> None:  # type: ignore[no-untyped-def]
    # a student's question before a maintenance window: when would my job start? (as the controller decides)
    tmp, fake = site
    now = fake.now().replace(tzinfo=None)

    def ask(limit: str):  # type: ignore[no-untyped-def]
        args = [
            "--config",
            str(tmp / "hivebatch.yaml"),
            "-A",
            "cv",
            "--gpus",
            "1",
            "-t",
            limit,
            str(tmp / "job.sh"),
        ]
        return predict(prepare(args, environ={}, stdin_read=None), now)

    free = ask("60")
    assert free.result == "placed" and free.slack_s is not None
    fake.reserve("maint", ["node1", "node2", "node3", "node4"], start_in_s=1800, duration_s=3600)
    assert ask("20").result == "placed"  # it ends before the reservation starts
    long = ask("60")
    assert long.result == "waiting" and "node1: reserved (maint) until" in (long.reason or "")
    (maint,) = fake.list_reservations()
    assert long.predicted_start == maint.end
    # its slack counts from that later end, as hq counts a waiting job's (before: as if it started now)
    assert long.slack_s == free.slack_s - (maint.end - now).total_seconds()


def test_hsub_test_only_says_what_slurm_would_refuse_instead_of_a_start(site, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # seen on the lab: "would start now on node2" of a job naming a node the cluster lacks, which sbatch
    # refuses (recorded: tests/fixtures/slurm/test_only_refusals.txt)
    from hivebatch.cli.hsub.main import run
    from hivebatch.slurm.types import SlurmError

    tmp, fake = site
    monkeypatch.setattr(os, "environ", dict(os.environ))  # hsub clears what it applied before sbatch runs
    asked: list[list[str]] = []

    def judged(refusal: str | None):  # type: ignore[no-untyped-def]
        def check(script: str, args: list[str]) -> None:
            asked.append(args)
            if refusal:
                raise SlurmError(["sbatch", "--test-only"], 1, refusal)

        return check

    argv = ["--config", str(tmp / "hivebatch.yaml"), "-A", "cv", "--gpus", "1", "-w", "nodeX", "--test-only",
            str(tmp / "job.sh")]  # fmt: skip
    fake.check_submission = judged("allocation failure: Invalid node name specified")
    with pytest.raises(
        HivebatchError, match="^Slurm refused the job: allocation failure: Invalid node name specified$"
    ):
        run(argv)
    assert "would start" not in capsys.readouterr().out and "--nodelist=nodeX" in asked[0]
    fake.check_submission = judged(None)
    assert run(argv[:6] + argv[8:]) == 0
    assert "would start now on node" in capsys.readouterr().out and not fake.list_jobs()
