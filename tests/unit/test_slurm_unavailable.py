"""What Slurm prints while slurmctld is down or has just restarted (recorded on the lab) is an outage."""

from __future__ import annotations

from pathlib import Path

import pytest

from hivebatch.slurm.cli import CliBackend, Completed
from hivebatch.slurm.parse import parse_sinfo_json, parse_squeue_json
from hivebatch.slurm.types import SlurmUnavailable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def _answer(name: str) -> Completed:
    """A recorded command output whose last line is ``rc=N``."""
    lines = (FIXTURES / name).read_text().splitlines()
    rc = int(lines[-1].removeprefix("rc="))
    text = "\n".join(lines[:-1]) + "\n"
    return Completed(rc, text if rc == 0 else "", text if rc != 0 else "")


def test_squeue_exit_0_with_errors_is_an_outage_not_an_empty_queue() -> None:
    with pytest.raises(SlurmUnavailable) as exc:
        parse_squeue_json((FIXTURES / "squeue_ctld_down.json").read_text())
    assert str(exc.value) == (
        "Slurm is unavailable (squeue --json: Failed while looking for jobs [slurm_load_jobs]); nothing changed"
    )


def test_sinfo_exit_0_with_errors_is_an_outage() -> None:
    with pytest.raises(SlurmUnavailable, match=r"sinfo --json: Unspecified error"):
        parse_sinfo_json((FIXTURES / "sinfo_ctld_down.json").read_text())


def test_nodes_just_after_a_restart_do_not_respond() -> None:
    nodes = parse_sinfo_json((FIXTURES / "sinfo_after_restart.json").read_text())
    assert len(nodes) == 4 and not any(n.responding for n in nodes)
    assert all(n.bad and n.gpus_used == [] for n in nodes)  # GPU use is unknown, not zero


def test_healthy_nodes_respond() -> None:
    nodes = parse_sinfo_json((FIXTURES / "sinfo.json").read_text())
    assert nodes and all(n.responding for n in nodes)


def test_ping_up_and_down() -> None:
    CliBackend(lambda argv, stdin, env: _answer("scontrol_ping_up.txt")).ping()
    with pytest.raises(SlurmUnavailable, match=r"Slurmctld\(primary\) at ctlhost is DOWN"):
        CliBackend(lambda argv, stdin, env: _answer("scontrol_ping_down.txt")).ping()


def test_listing_through_the_cli_backend_raises_on_the_recorded_outage() -> None:
    down = Completed(0, (FIXTURES / "squeue_ctld_down.json").read_text(), "")
    with pytest.raises(SlurmUnavailable):
        CliBackend(lambda argv, stdin, env: down).list_jobs()


def test_a_jobs_gpu_indices_are_read_from_squeues_structured_record() -> None:
    """The indices a suspected grant mismatch is checked against come from squeue's JSON gres detail.
    ``scontrol -d show job`` prints the job's name as typed, so a name with a line break adds a detail
    line of the owner's choosing (recorded for the same lab job: node4 IDX 7 on a job running on node1)."""
    recorded = (FIXTURES / "squeue_feigned_detail_name.json").read_text()
    asked: list[list[str]] = []

    def answer(argv: list[str], stdin: str | None, env: object) -> Completed:
        asked.append(argv)
        return Completed(0, recorded, "")

    feigned = (FIXTURES / "scontrol_feigned_detail_name.txt").read_text()
    assert "Nodes=node4 CPU_IDs=0 Mem=0 GRES=gpu:g7:1(IDX:7)" in feigned.splitlines()[1]
    assert CliBackend(answer).job_gpus(619) == {"node1": [4, 5]}
    assert CliBackend(answer).job_gpus(620) == {}
    assert asked[0][:2] == ["squeue", "--json"]


def test_admin_comment_is_read_and_is_not_the_owners_to_change() -> None:
    """What the job's owner cannot edit (AdminComment: set by root or an Operator; the owner's
    ``scontrol update`` is refused, tests/fixtures/slurm/err_update_admin_comment_by_owner.txt)."""
    (job,) = parse_squeue_json((FIXTURES / "squeue_admin_comment.json").read_text())
    assert job.admin_comment == 'hivebatch:v1:{"gpus":1,"vc":"cv"}' and job.comment == "user text"
    refused = (FIXTURES / "err_update_admin_comment_by_owner.txt").read_text().splitlines()
    assert refused[-1] == "rc=1" and refused[0].startswith("Access/permission denied for job")
