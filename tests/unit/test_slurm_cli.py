"""The CLI backend builds argument lists, fixes the time format and turns failures into SlurmError."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from recorded_output import recorded_output
from recorded_sacct import as_printed_for

from hivebatch.slurm.cli import CliBackend, Completed, subprocess_runner
from hivebatch.slurm.types import SlurmError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class Recorder:
    def __init__(self, *answers: Completed) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[str], str | None, dict[str, str]]] = []

    def __call__(self, argv, stdin, env):
        self.calls.append((argv, stdin, env))
        return self.answers.pop(0) if self.answers else Completed(0, "", "")


class SacctAnswer(Recorder):
    """sacct answering with recorded rows, printed as the command asked."""

    def __init__(self, recorded: str) -> None:
        super().__init__()
        self.recorded = recorded

    def __call__(self, argv, stdin, env):
        self.calls.append((argv, stdin, env))
        return Completed(0, as_printed_for(argv, self.recorded), "")


def test_submit_passes_script_on_stdin_and_options_as_a_list():
    rec = Recorder(Completed(0, "17\n", ""))
    jid = CliBackend(rec).submit("#!/bin/sh\necho hi\n", ["--hold", "-J", "a b; rm -rf /"], env={"X": "1"})
    assert jid == 17
    argv, stdin, env = rec.calls[0]
    assert argv == ["sbatch", "--parsable", "--hold", "-J", "a b; rm -rf /"]
    assert stdin == "#!/bin/sh\necho hi\n"
    assert env["SLURM_TIME_FORMAT"] == "%s" and env["X"] == "1"


def test_submit_refuses_a_script_without_shebang():
    with pytest.raises(SlurmError):
        CliBackend(Recorder()).submit("echo hi", [])


def test_update_pending_pins_node_count():
    rec = Recorder()
    CliBackend(rec).update_pending(5, nodelist=["node2"], num_nodes=1, gres="gpu:g3:1,gpu:g5:1")
    assert rec.calls[0][0] == [
        "scontrol",
        "update",
        "JobId=5",
        "Gres=gpu:g3:1,gpu:g5:1",
        "NodeList=node2",
        "NumNodes=1-1",
    ]
    CliBackend(rec).update_pending(5)
    assert len(rec.calls) == 1  # nothing to change, nothing run


@pytest.mark.parametrize(
    ("method", "argv"),
    [
        ("release", ["scontrol", "release", "9"]),
        # the controller's hold: scontrol hold's priority 0 with the begin time the plugin drops, so an
        # admin's own hold stays told apart (tests/fixtures/slurm/admin_hold_marked.txt)
        ("hold", ["scontrol", "update", "JobId=9", "Priority=0", "StartTime=2100-01-04T00:00:00"]),
        ("requeue_hold", ["scontrol", "requeuehold", "9"]),
        ("cancel", ["scancel", "9"]),
    ],
)
def test_job_actions(method, argv):
    rec = Recorder()
    getattr(CliBackend(rec), method)(9)
    assert rec.calls[0][0] == argv


def test_run_as_prefixes_runuser():
    rec = Recorder()
    CliBackend(rec, run_as="bob").release(3)
    assert rec.calls[0][0] == ["runuser", "-u", "bob", "--", "scontrol", "release", "3"]


def test_failure_is_a_typed_error_with_command_code_and_stderr(slurm_fixture):
    stderr = slurm_fixture("err_release_other_user.txt").split("rc=")[0]
    rec = Recorder(Completed(1, "", stderr))
    with pytest.raises(SlurmError) as err:
        CliBackend(rec, run_as="bob").release(2)
    e = err.value
    assert e.command == ["scontrol", "release", "2"] and e.returncode == 1
    assert "Invalid user id" in e.stderr and e.permission_denied and not e.unknown_job
    assert "\n" not in str(e) and "Invalid user id for job 2" in str(e)


def test_cancel_permission_error_recorded(slurm_fixture):
    text = slurm_fixture("err_cancel_other_user.txt")
    rec = Recorder(Completed(210, "", text.split("rc=")[0]))
    with pytest.raises(SlurmError) as err:
        CliBackend(rec).cancel(2)
    assert err.value.permission_denied and err.value.returncode == 210


def test_list_jobs_filters_what_squeue_json_does_not(slurm_fixture):
    rec = Recorder(Completed(0, slurm_fixture("squeue.json"), ""))
    jobs = CliBackend(rec).list_jobs([3, 4, 999])
    assert [j.job_id for j in jobs] == [3, 4]
    assert rec.calls[0][0] == ["squeue", "--json"]


def test_list_nodes(slurm_fixture):
    rec = Recorder(Completed(0, slurm_fixture("sinfo.json"), ""))
    assert len(CliBackend(rec).list_nodes()) == 4
    assert rec.calls[0][0] == ["sinfo", "--json"]


def test_gpu_group_limits_read_as_sacctmgr_prints_them():
    from hivebatch.slurm.types import GpuLimit

    rec = Recorder(Completed(0, recorded_output("sacctmgr_assoc_grptres.txt"), ""))
    # nlp's MaxTRES caps one job, not the account's total: it is not a GrpTRES
    assert CliBackend(rec).gpu_group_limits() == [
        GpuLimit("cv", "", 4),
        GpuLimit("cv", "alice", 2),
        GpuLimit("sys", "", 8),
    ]
    assert rec.calls[0][0] == [
        "sacctmgr", "--noheader", "--parsable2", "show", "assoc", "format=Account,User,GrpTRES"
    ]  # fmt: skip


def test_history_arguments(slurm_fixture):
    rec = SacctAnswer(slurm_fixture("sacct.txt"))
    be = CliBackend(rec)
    recs = be.history([7, 8])
    assert {r.job_id for r in recs} >= {7, 8}
    argv = rec.calls[0][0]
    assert argv[:5] == ["sacct", "--parsable2", "--noheader", "-X", "--allusers"]
    assert argv[argv.index("-o") + 1].endswith(",JobName")  # the only text a user chose, last
    assert argv[argv.index("-j") + 1] == "7,8" and "-S" not in argv
    be.history(since=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    argv = rec.calls[1][0]
    assert "-S" in argv and "-j" not in argv
    assert be.history([]) == [] and len(rec.calls) == 2


def test_every_run_of_a_requeued_job_from_recorded_sacct(slurm_fixture):
    # recorded on the lab: two jobs, each requeued once mid-run (one held and released)
    rec = SacctAnswer(slurm_fixture("sacct_requeued_runs.txt"))
    rows = CliBackend(rec).history([6636, 6637], runs=True)
    assert "--duplicates" in rec.calls[0][0]
    assert [(r.job_id, r.state) for r in rows] == [
        (6636, "REQUEUED"), (6636, "COMPLETED"), (6637, "REQUEUED"), (6637, "COMPLETED"),
    ]  # fmt: skip
    for first, then in (rows[:2], rows[2:]):
        # the later run is submitted at the requeue: the user's submission is the first run's
        assert then.submit_time == first.end_time and first.submit_time < then.submit_time


def test_missing_command_is_a_slurm_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SlurmError) as err:
        CliBackend().list_nodes()
    assert err.value.returncode == 127 and "not found" in str(err.value)


def test_accounts_and_qos_from_recorded_sacctmgr(slurm_fixture):
    rec = Recorder(
        Completed(0, slurm_fixture("sacctmgr_accounts.txt"), ""),
        Completed(0, slurm_fixture("sacctmgr_qos.txt"), ""),
    )
    be = CliBackend(rec)
    assert be.list_accounts() == ["cv", "hivebatch", "nlp", "root", "sys"]
    assert be.list_qos() == ["normal", "urgent", "prior", "opportunistic"]
    assert rec.calls[0][0][:3] == ["sacctmgr", "--noheader", "--parsable2"]
    assert rec.calls[1][0][-2:] == ["qos", "format=Name"]


def test_array_tasks_are_named_by_their_index_as_scontrol_needs(slurm_fixture):
    # recorded on the lab: `scontrol update JobId=<task's own id> NumNodes=…` is refused ("Job resizing
    # not supported for job arrays") and `scontrol release <array id>` releases every task of the array
    rec = Recorder(Completed(0, slurm_fixture("squeue_array_split.json"), ""))
    b = CliBackend(runner=rec)
    b.list_jobs()
    b.update_pending(2334, nodelist=["node1"], num_nodes=1, gres="gpu:g0:1")
    b.release(2334)
    b.release(2333)  # the record of the tasks not split off: its own id (never placed by hivebatch)
    b.split_array_task(2333, 4)
    assert [c[0][:3] for c in rec.calls[1:]] == [
        ["scontrol", "update", "JobId=2333_0"],
        ["scontrol", "release", "2333_0"],
        ["scontrol", "release", "2333"],
        ["scontrol", "update", "JobId=2333_4"],
    ]
    assert rec.calls[-1][0][3:] == ["Priority=0", "StartTime=2100-01-04T00:00:00"]


def test_an_array_tasks_accounting_is_found_by_its_own_id(slurm_fixture):
    # a task's JobID is ARRAY_TASK; read by it, task 0 (job 39) was filed under 38 and a controller back
    # from an outage kept it running on its GPUs for ever ("its accounting has no record of it yet")
    rec = SacctAnswer(slurm_fixture("sacct_array_tasks.txt"))
    records = {r.job_id: r for r in CliBackend(rec).history([39, 38])}
    assert rec.calls[0][0][-2:] == ["-j", "39,38"]
    assert sorted(records) == [38, 39]
    assert records[39].gpus == {"node1": [0]} and records[38].gpus == {"node1": [1]}
    assert records[39].state == records[38].state == "COMPLETED"


def test_a_signal_reaches_the_array_task_alone(slurm_fixture):
    # recorded on the lab (scancel_signal_array_task.txt): `scancel -b -s USR1 <id>` where the id is the
    # task's own and also the array's signals every task of the array; `<array>_<index>` that task alone
    rec = Recorder(Completed(0, slurm_fixture("squeue_array_split.json"), ""))
    b = CliBackend(runner=rec)
    b.list_jobs()
    b.signal(2329, "USR1", "batch")  # task 3, which kept the array's id
    b.signal(2330, "USR1", "batch")  # task 0, split off with an id of its own
    b.signal(2326, "USR1", "batch")  # not an array task
    assert [c[0][-1] for c in rec.calls[1:]] == ["2329_3", "2329_0", "2326"]
    assert all("--batch" in c[0] and "--signal=USR1" in c[0] for c in rec.calls[1:])


def test_the_requeue_delay_from_slurmctlds_config(slurm_fixture):
    from hivebatch.slurm.parse import parse_show_config, requeue_delay_s

    rec = Recorder(Completed(0, slurm_fixture("scontrol_show_config.txt"), ""))
    config = CliBackend(rec).config()
    assert rec.calls[0][0] == ["scontrol", "show", "config"]
    assert config["AuthInfo"] == "cred_expire=10" and config["SelectType"] == "select/cons_tres"
    assert requeue_delay_s(config) == 11  # on the lab a requeued job is eligible 11 s later
    assert requeue_delay_s({}) == 121  # Slurm's default cred_expire, 120 s
    assert requeue_delay_s(parse_show_config("AuthInfo = socket=/run/munge.sock,cred_expire=30\n")) == 31


def test_notify_is_tried_only_by_root_or_slurmuser(slurm_fixture):
    lab = slurm_fixture("scontrol_show_config.txt")  # SlurmUser = root(0)
    slurm_user = lab.replace("SlurmUser               = root(0)", "SlurmUser               = slurm(64030)")
    assert CliBackend(Recorder(Completed(0, lab, "")), run_as="root").may_notify_others()
    assert not CliBackend(Recorder(Completed(0, lab, "")), run_as="hbctl").may_notify_others()
    assert CliBackend(Recorder(Completed(0, slurm_user, "")), run_as="slurm").may_notify_others()
    down = Recorder(Completed(1, "", "slurm_load_ctl_conf error: Unable to contact slurm controller"))
    backend = CliBackend(down, run_as="root")
    assert not backend.may_notify_others()  # unknown for now, asked again later
    down.answers.append(Completed(0, lab, ""))
    assert backend.may_notify_others()
    rec = Recorder()
    CliBackend(rec).notify(7, "hivebatch: job 7 cannot be placed: x; y")
    assert rec.calls[0][0] == ["scontrol", "notify", "7", "hivebatch: job 7 cannot be placed: x; y"]


def test_a_job_name_that_is_not_utf8_does_not_stop_the_listing():
    # recorded on the lab: squeue --json prints a job's name and comment as the bytes sbatch got
    # (`sbatch -J $'caf\xe9' --comment $'r\xe9sum\xe9'`, Latin-1); one such job of any user stopped every
    # cycle of the controller, and hq, with a UnicodeDecodeError
    recorded = FIXTURES / "slurm" / "squeue_latin1_name.json"
    assert b'"caf\xe9"' in recorded.read_bytes()
    real = subprocess_runner()

    def cat(argv, stdin, env):
        return real(["cat", str(recorded)], stdin, env)

    (job,) = CliBackend(cat).list_jobs()
    assert (job.job_id, job.name, job.comment) == (120, "caf\ufffd", "r\ufffdsum\ufffd")


def test_a_job_name_cannot_shift_or_forge_accounting_records():
    # recorded on the lab with sacct's --delimiter (tests/fixtures/slurm/sacct_user_text.txt): alice named
    # 215 with a line break, 216 with a "|", and 256 with a line break and a whole "|"-separated record of a
    # job 777 of bob's. Read with "|", 215 and 256 were lost (a controller back from an outage keeps such
    # a job on its GPUs for ever), 216 read as in state "normal", and a job 777 appeared, COMPLETED.
    recorded = (FIXTURES / "slurm" / "sacct_user_text.txt").read_text()

    def sacct(argv, stdin, env):
        # the delimiter of the recording; the backend's own is new on every call
        assert "--delimiter=" + RECORDED_DELIMITER not in argv
        return Completed(0, recorded.replace(RECORDED_DELIMITER, _delimiter(argv)), "")

    records = {r.job_id: r for r in CliBackend(sacct).history([215, 216, 256, 777])}
    assert sorted(records) == [215, 216, 217, 218, 219, 220, 224, 256]
    assert (records[215].name, records[215].state, records[215].gpus) == (
        "n\nl",
        "COMPLETED",
        {"node1": [0, 1]},
    )
    assert (records[216].name, records[216].state, records[216].exit_code) == ("p|q", "FAILED", "3:0")
    assert records[256].name.startswith("forge\n777|777|bob|") and records[256].user == "alice"
    assert records[256].state == "CANCELLED"


RECORDED_DELIMITER = "|hb5f0e1d2c3b4a|"


def _delimiter(argv: list[str]) -> str:
    return next(a.split("=", 1)[1] for a in argv if a.startswith("--delimiter="))


def test_a_submission_is_judged_by_slurm_without_being_submitted(slurm_fixture):
    # recorded on the lab (test_only_refusals.txt): sbatch --test-only runs slurmctld's checks and the plugin's
    recorded = slurm_fixture("test_only_refusals.txt").split("$ sbatch --test-only --gpus=1 -w nodeX")[1]
    stderr = "\n".join(ln.strip() for ln in recorded.splitlines()[1:3])
    rec = Recorder(Completed(0, "", ""), Completed(1, "", stderr))
    be = CliBackend(rec)
    be.check_submission("#!/bin/sh\nhostname\n", ["--gpus=1"])
    assert rec.calls[0][:2] == (["sbatch", "--test-only", "--gpus=1"], "#!/bin/sh\nhostname\n")
    with pytest.raises(SlurmError, match="Invalid node name specified"):
        be.check_submission("#!/bin/sh\nhostname\n", ["--gpus=1", "-w", "nodeX"])
