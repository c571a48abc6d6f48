"""The default backend: Slurm's own commands, run with argument lists (never through a shell)."""

from __future__ import annotations

import os
import pwd
import secrets
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from hivebatch.errors import HivebatchError
from hivebatch.request import CONTROLLER_HOLD_AT, HELD_BEGIN_AT, OWNER_HOLD_SITE
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.parse import (
    SACCT_FIELDS,
    parse_job_id,
    parse_licenses,
    parse_partitions,
    parse_reservations,
    parse_sacct,
    parse_show_config,
    parse_sinfo_json,
    parse_squeue_json,
)
from hivebatch.slurm.types import (
    SIGNAL_TARGETS,
    AcctRecord,
    GpuLimit,
    Partition,
    Reservation,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmUnavailable,
)
from hivebatch.submit.timefmt import parse_time_limit

#: Fixed environment for every command: epoch times, and nothing from the user's SQUEUE_FORMAT etc.
FIXED_ENV = {"SLURM_TIME_FORMAT": "%s"}
_DROP_ENV = ("SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SINFO_FORMAT", "SACCT_FORMAT", "SQUEUE_SORT")


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str


#: (argv, stdin text, extra env) -> Completed; replaced in tests by a recorder
Runner = Callable[[list[str], str | None, dict[str, str]], Completed]


def subprocess_runner(timeout_s: float = 60.0) -> Runner:
    def run(argv: list[str], stdin: str | None, env: dict[str, str]) -> Completed:
        full_env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
        full_env.update(env)
        try:
            p = subprocess.run(
                argv,
                # a job script is the bytes its owner wrote (hivebatch.submit.script.decode_script)
                input=None if stdin is None else stdin.encode("utf-8", "surrogateescape"),
                capture_output=True,
                env=full_env,
                timeout=timeout_s,
                check=False,
            )
        except FileNotFoundError:
            raise SlurmError(
                argv, 127, f"{argv[0]}: command not found (is slurm-client installed?)"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmError(
                argv, 124, f"no answer within {timeout_s:.0f} s (is slurmctld running?)"
            ) from None
        # a job's name, comment or paths are the bytes its owner gave sbatch, which Slurm prints as they
        # are: one in Latin-1 stopped every listing (tests/fixtures/slurm/squeue_latin1_name.json)
        return Completed(
            p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        )

    return run


class CliBackend(SlurmBackend):
    """``sbatch``/``scontrol``/``scancel``/``squeue``/``sinfo``/``sacct``.

    ``run_as`` runs every command as that Unix user through ``runuser`` (root only): the lab's tests
    use it to act as a student or as the Operator.
    """

    name = "cli"

    def __init__(self, runner: Runner | None = None, run_as: str | None = None) -> None:
        self._runner = runner or subprocess_runner()
        self.run_as = run_as
        # array tasks seen in the last listing, by job id -> "ARRAY_TASK": scontrol and scancel read a
        # bare array job id as every task of the array, so a task is always named by its index
        self._task_names: dict[int, str] = {}
        self._notify_ok: bool | None = None

    def _name(self, job_id: int) -> str:
        return self._task_names.get(int(job_id), str(int(job_id)))

    def as_user(self, user: str) -> CliBackend:
        return CliBackend(self._runner, run_as=user)

    def _run(self, argv: Sequence[str], stdin: str | None = None, env: dict[str, str] | None = None) -> str:
        # scontrol prints some refusals on stderr yet exits 0 for a few operations; they are not errors
        return self._completed(argv, stdin, env).stdout

    def _completed(
        self, argv: Sequence[str], stdin: str | None = None, env: dict[str, str] | None = None
    ) -> Completed:
        cmd = list(argv)
        full = ["runuser", "-u", self.run_as, "--", *cmd] if self.run_as else cmd
        extra = dict(FIXED_ENV)
        if env:
            extra.update(env)
        res = self._runner(full, stdin, extra)
        if res.returncode != 0:
            raise SlurmError(cmd, res.returncode, res.stderr or res.stdout)
        return res

    # --- actions ---------------------------------------------------------------------------------

    def submit(self, script_text: str, sbatch_args: list[str], env: dict[str, str] | None = None) -> int:
        return self.submit_told(script_text, sbatch_args, env)[0]

    def submit_told(
        self, script_text: str, sbatch_args: list[str], env: dict[str, str] | None = None
    ) -> tuple[int, list[str]]:
        res = self._sbatch("--parsable", script_text, sbatch_args, env)
        return parse_job_id(res.stdout), [ln for ln in res.stderr.splitlines() if ln.strip()]

    def check_submission(self, script_text: str, sbatch_args: list[str]) -> None:
        self._sbatch("--test-only", script_text, sbatch_args)

    def _sbatch(
        self, mode: str, script_text: str, sbatch_args: list[str], env: dict[str, str] | None = None
    ) -> Completed:
        """sbatch ``mode`` (--parsable or --test-only) with the script on its standard input."""
        if not script_text.startswith("#!"):
            raise SlurmError(["sbatch"], 1, "the batch script must start with a #! line")
        return self._completed(["sbatch", mode, *sbatch_args], stdin=script_text, env=env)

    def update_pending(
        self,
        job_id: int,
        nodelist: list[str] | None = None,
        num_nodes: int | None = None,
        gres: str | None = None,
        min_cpus_per_node: int | None = None,
        min_mem_per_node_mb: int | None = None,
        tasks_per_node: int | None = None,
    ) -> None:
        args = ["scontrol", "update", f"JobId={self._name(job_id)}"]
        if gres is not None:
            args.append(f"Gres={gres}")
        if nodelist is not None:
            args.append(f"NodeList={','.join(nodelist)}")
        if num_nodes is not None:
            # NumNodes=N only sets a minimum; N-N pins the count
            args.append(f"NumNodes={int(num_nodes)}-{int(num_nodes)}")
        per_node = {
            "MinCPUsNode": min_cpus_per_node,
            "MinMemoryNode": min_mem_per_node_mb,
            "TasksPerNode": tasks_per_node,
        }
        args += [f"{key}={int(value)}" for key, value in per_node.items() if value is not None]
        if len(args) == 3:
            return
        self._run(args)

    def release(self, job_id: int) -> None:
        self._run(["scontrol", "release", self._name(job_id)])

    def split_array_task(self, array_job_id: int, task_id: int) -> None:
        self._hold(f"{int(array_job_id)}_{int(task_id)}")

    def clear_dependency(self, job_id: int) -> None:
        self._run(["scontrol", "update", f"JobId={self._name(job_id)}", "Dependency="])

    def clear_begin_time(self, job_id: int, to: datetime | None = None) -> None:
        if to is None:
            self._run(["scontrol", "update", f"JobId={self._name(job_id)}", "StartTime=now"])
        else:
            self._set_begin(job_id, to)

    def mark_owner_hold(self, job_id: int) -> None:
        self._set_begin(job_id, HELD_BEGIN_AT)

    def _set_begin(self, job_id: int, when: datetime) -> None:
        # scontrol reads the time in its own time zone: it is given as an instant in UTC
        at = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        self._run(["scontrol", "update", f"JobId={self._name(job_id)}", f"StartTime={at}"], env={"TZ": "UTC"})

    def guard_owner_hold(self, job_id: int) -> None:
        self._run(["scontrol", "update", f"JobId={self._name(job_id)}", f"SiteFactor={OWNER_HOLD_SITE}"])

    def user_hold(self, job_id: int) -> None:
        self._run(["scontrol", "uhold", self._name(job_id)])

    def hold(self, job_id: int) -> None:
        self._hold(self._name(job_id))

    def _hold(self, name: str) -> None:
        # what scontrol hold does (priority 0, shown as JobHeldAdmin), with the begin time by which the
        # job_submit plugin tells the controller's hold from an admin's and drops (request.CONTROLLER_HOLD_AT)
        when = CONTROLLER_HOLD_AT.strftime("%Y-%m-%dT%H:%M:%S")
        self._run(
            ["scontrol", "update", f"JobId={name}", "Priority=0", f"StartTime={when}"], env={"TZ": "UTC"}
        )

    def requeue_hold(self, job_id: int) -> None:
        self._run(["scontrol", "requeuehold", self._name(job_id)])

    def cancel(self, job_id: int) -> None:
        self._run(["scancel", self._name(job_id)])

    def signal(self, job_id: int, signal: str, target: str) -> None:
        self._run(["scancel", *SIGNAL_TARGETS[target], f"--signal={signal}", self._name(job_id)])

    def notify(self, job_id: int, message: str) -> None:
        self._run(["scontrol", "notify", self._name(job_id), message])

    def may_notify_others(self) -> bool:
        if self._notify_ok is None:
            me = self.run_as or pwd.getpwuid(os.geteuid()).pw_name
            try:
                slurm_user = self.config().get("SlurmUser", "").split("(", 1)[0]
            except SlurmError:
                return False  # asked again next time: slurmctld may be back
            self._notify_ok = me in ("root", slurm_user)
        return self._notify_ok

    # --- queries ---------------------------------------------------------------------------------

    def list_jobs(self, job_ids: list[int] | None = None) -> list[SlurmJob]:
        # squeue --json ignores -j/-u/-t on 22.05: fetch all once and filter here
        jobs = parse_squeue_json(self._run(["squeue", "--json"]))
        self._task_names = {
            j.job_id: f"{j.array_job_id}_{j.array_task_id}"
            for j in jobs
            if j.array_job_id and j.array_task_id is not None
        }
        if job_ids is not None:
            wanted = {int(j) for j in job_ids}
            jobs = [j for j in jobs if j.job_id in wanted]
        return jobs

    def list_nodes(self) -> list[SlurmNode]:
        return parse_sinfo_json(self._run(["sinfo", "--json"]))

    def list_reservations(self) -> list[Reservation]:
        return parse_reservations(self._run(["scontrol", "show", "reservation", "-o"]))

    def list_partitions(self) -> list[Partition]:
        return parse_partitions(self._run(["scontrol", "show", "partition", "-o"]))

    def list_licenses(self) -> dict[str, int]:
        return parse_licenses(self._run(["scontrol", "show", "licenses", "-o"]))

    def kills_invalid_dependencies(self) -> bool:
        # slurmctld looks for the word anywhere in the setting, in any case (tests/fixtures/slurm/
        # kill_invalid_depend_site.txt)
        return "kill_invalid_depend" in self.config().get("DependencyParameters", "").lower()

    def ping(self) -> None:
        # 'Slurmctld(primary) at HOST is UP' (exit 0) or '… is DOWN' and a banner (exit 1)
        try:
            out = self._run(["scontrol", "ping"])
        except SlurmError as exc:
            first = (exc.stderr.strip().splitlines() or ["no answer"])[0]
            raise SlurmUnavailable(["scontrol", "ping"], first, exc.returncode) from None
        if " is UP" not in out:
            raise SlurmUnavailable(["scontrol", "ping"], (out.strip().splitlines() or ["no answer"])[0])

    def history(
        self, job_ids: list[int] | None = None, since: datetime | None = None, runs: bool = False
    ) -> list[AcctRecord]:
        # a separator no user can put in a job name: with "|", a name could shift another job's fields or
        # read as a record of a job of its own choosing (tests/fixtures/slurm/sacct_user_text.txt)
        delimiter = f"|hb{secrets.token_hex(6)}|"
        args = ["sacct", "--parsable2", "--noheader", "-X", "--allusers", f"--delimiter={delimiter}"]
        args += ["-o", ",".join(SACCT_FIELDS)]
        if runs:
            args.append("--duplicates")
        if job_ids is not None:
            if not job_ids:
                return []
            args += ["-j", ",".join(str(int(j)) for j in job_ids)]
        if since is not None:
            local = since.astimezone() if since.tzinfo else since
            args += ["-S", local.strftime("%Y-%m-%dT%H:%M:%S")]
        elif job_ids is None:
            args += ["-S", "1970-01-01T00:00:00"]
        return parse_sacct(self._run(args), delimiter=delimiter)

    def config(self) -> dict[str, str]:
        """slurmctld's running configuration (``scontrol show config``), key -> value."""
        return parse_show_config(self._run(["scontrol", "show", "config"]))

    def list_accounts(self) -> list[str]:
        return _names(
            self._run(["sacctmgr", "--noheader", "--parsable2", "show", "account", "format=Account"])
        )

    def default_account(self, user: str) -> str:
        out = self._run(
            ["sacctmgr", "--noheader", "--parsable2", "show", "user", user, "format=DefaultAccount"]
        )
        names = _names(out)
        return names[0] if names else ""

    def list_qos(self) -> list[str]:
        return _names(self._run(["sacctmgr", "--noheader", "--parsable2", "show", "qos", "format=Name"]))

    def gpu_group_limits(self) -> list[GpuLimit]:
        return gpu_group_limits(
            self._run(
                ["sacctmgr", "--noheader", "--parsable2", "show", "assoc", "format=Account,User,GrpTRES"]
            )
        )

    def qos_grace_s(self, qos: str) -> int | None:
        out = self._run(["sacctmgr", "--noheader", "--parsable2", "show", "qos", qos, "format=GraceTime"])
        lines = [ln.strip().rstrip("|") for ln in out.splitlines() if ln.strip()]
        return grace_seconds(lines[0]) if lines else None


def gpu_group_limits(out: str) -> list[GpuLimit]:
    """``sacctmgr --parsable2 show assoc format=Account,User,GrpTRES`` lines with a ``gres/gpu=N``
    total (a typed ``gres/gpu:TYPE=N`` caps one model only, and is left out)."""
    limits: list[GpuLimit] = []
    for line in out.splitlines():
        account, _, rest = line.strip().partition("|")
        user, _, tres = rest.partition("|")
        for item in tres.rstrip("|").split(","):
            key, _, value = item.partition("=")
            if key == "gres/gpu" and value.isdigit():
                limits.append(GpuLimit(account, user, int(value)))
    return limits


def grace_seconds(text: str) -> int | None:
    """sacctmgr's GraceTime ([D-]HH:MM:SS; 00:00:00 when none) in seconds; None when unreadable."""
    if text.strip(" 0:-") == "":
        return 0
    try:
        return parse_time_limit(text)
    except HivebatchError:
        return None


def _names(out: str) -> list[str]:
    """One name per line of ``sacctmgr --parsable2`` output, in order, without repeats."""
    seen: dict[str, None] = {}
    for line in out.splitlines():
        name = line.strip().rstrip("|")
        if name:
            seen.setdefault(name, None)
    return list(seen)
