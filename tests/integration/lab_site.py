"""A private hivebatch site on the Slurm lab (its own config, SQLite ledger and lock, hsub/hq as installed
for the lab's users), and the runner that plays a docs page's console blocks on it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docs_pages import console_steps, shape_pattern, shown_file, shows_error

PROJECT = Path(__file__).resolve().parents[2]
VENV_BIN = PROJECT / ".venv" / "bin"


@dataclass
class Site:
    """A private hivebatch config (its own SQLite ledger and lock) in a directory the lab users can read."""

    dir: Path
    config: Path
    user_bin: Path  # hsub/hq the lab users may execute

    def env(self) -> dict[str, str]:
        return {**os.environ, "HIVEBATCH_CONFIG": str(self.config)}

    def as_user(self, user: str | None, tool: str, *args: str, cwd: Path | None = None, extra_env: dict[str, str] | None = None,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        exe = str((self.user_bin if user else VENV_BIN) / tool)
        argv = ["runuser", "-u", user, "--", exe, *args] if user else [exe, *args]
        # errors="replace": hsub --dry-run prints a script's bytes that are not UTF-8 as they are
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", env={**self.env(), **(extra_env or {})},
                              cwd=cwd or self.dir, timeout=120, input=stdin, check=False)  # fmt: skip

    def controller_once(self) -> None:
        proc = subprocess.run([str(VENV_BIN / "hivebatch"), "controller", "run", "--once", "-q", "--config", str(self.config)],
                              capture_output=True, text=True, env=self.env(), timeout=120, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr


@contextmanager
def lab_site(
    slurm_lab: Any, sharing: dict[str, Any] | None = None, user_limits: dict[str, Any] | None = None
) -> Iterator[Site]:
    """The example config with paths of its own (and ``sharing:`` or ``user_limits:`` replaced when
    given), set up as the quickstart sets up a site."""
    import yaml

    base = slurm_lab.jobs_dir / f"site-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    base.chmod(0o1777)
    config = base / "hivebatch.yaml"
    # the ledger's directory is not writable by the users, as on a real site: hq must read it anyway
    (base / "db").mkdir(mode=0o755)
    text = (PROJECT / "etc" / "hivebatch.example.yaml").read_text()
    text = text.replace("sqlite:///var/hivebatch.db", f"sqlite:///{base / 'db' / 'hivebatch.db'}")
    text = text.replace("lock_file: var/hivebatch-controller.lock", f"lock_file: {base / 'controller.lock'}")
    sections = {"sharing": sharing, "user_limits": user_limits}
    if any(v is not None for v in sections.values()):
        data = yaml.safe_load(text)
        data.update({k: v for k, v in sections.items() if v is not None})
        text = yaml.safe_dump(data, sort_keys=False)
    config.write_text(text)
    config.chmod(0o644)
    # the quickstart's setup step: migrations, and a Python the lab users may execute
    proc = subprocess.run([str(PROJECT / "scripts" / "quickstart"), "--setup"], capture_output=True, text=True,
                          env={**os.environ, "HIVEBATCH_CONFIG": str(config)}, timeout=900, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    user_bin = Path(proc.stdout.strip().splitlines()[-1])
    assert (user_bin / "hsub").exists()
    try:
        yield Site(base, config, user_bin)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def page_dir(site: Site) -> Path:
    workdir = site.dir / f"docs-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(mode=0o777)
    workdir.chmod(0o777)
    return workdir


# commands whose output shows what Slurm and the controller have done by then: a released job starts within
# Slurm's scheduling interval, a job leaves when its signal lands, so they are asked again until the page's
# output appears, as a student reruns squeue and cron reruns the controller
CATCH_UP = ("hq", "cat", "hadmin", "squeue", "sacct", "hivebatch controller run --once")
CATCH_UP_S = 20.0
# what sbatch/hsub and hadmin profile run say when they leave a job in Slurm
SUBMITTED = re.compile(r"(?:Submitted batch job|submitted profiling job) (\d+)")


def run_page(
    site: Site, page: str, workdir: Path, submitted: list[str], plain: str | None = "alice"
) -> dict[str, list[str]]:
    """Every command of the page's console blocks, in ``workdir``: ``$`` as ``plain`` (None: the page's ``$``
    commands are the offline docs test's), ``bob$``/``carol$`` as that lab user, ``admin$`` as the administrator
    (the project's own tools), ``root#`` as root in the checkout. ``cat FILE`` of a file that is not there yet is the page showing the file the next
    commands use. Ids of the jobs submitted are added to ``submitted``. Returns what each command printed last."""
    printed_by: dict[str, list[str]] = {}
    for who, command, shown in console_steps(PROJECT / "docs" / page):
        if not (who or plain):
            continue
        name = shown_file(command)
        if name and not (workdir / name).exists():
            (workdir / name).write_text("\n".join(shown) + "\n")
            (workdir / name).chmod(0o755)
            continue
        deadline = time.monotonic() + (
            CATCH_UP_S if command.split()[0] in CATCH_UP or command in CATCH_UP else 0
        )
        printed: list[str] = []  # every attempt's output, for the failure message
        while True:
            proc = _run_as(site, who or str(plain), command, workdir)
            output = [line.rstrip() for line in (proc.stdout + proc.stderr).splitlines()]
            printed += output
            missing = [
                line for line in shown if not any(shape_pattern(line).fullmatch(out) for out in output)
            ]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(1)
        submitted += [m.group(1) for line in output if (m := SUBMITTED.match(line))]
        assert (proc.returncode != 0) == shows_error(shown), f"{command}\n{proc.stdout}{proc.stderr}"
        assert not missing, f"docs/{page} shows {missing[0]!r} after `{command}`; it printed:\n" + "\n".join(
            printed
        )
        printed_by[command] = output
    return printed_by


def _run_as(site: Site, who: str, command: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    env = site.env()
    if who == "root":  # in the checkout, with the lab's own environment and no site config
        env = {k: v for k, v in os.environ.items() if k != "HIVEBATCH_CONFIG"}
        workdir = PROJECT
    if who in ("admin", "root"):
        argv = ["bash", "-c", command]
        env["PATH"] = f"{VENV_BIN}:/usr/sbin:/usr/bin:/sbin:/bin"  # root's, with the project's tools first
    else:  # hsub and hq as installed for the lab's users
        argv = [
            "runuser",
            "-u",
            who,
            "--",
            "env",
            f"PATH={site.user_bin}:/usr/bin:/bin",
            "bash",
            "-c",
            command,
        ]
    return subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=workdir, timeout=120, check=False
    )


def cancel(submitted: list[str]) -> None:
    for jid in submitted:
        subprocess.run(["scancel", jid], capture_output=True, check=False)


def play_page(
    site: Site, page: str, plain: str | None = "alice", workdir: Path | None = None
) -> dict[str, list[str]]:
    """``run_page`` in a fresh directory (or ``workdir``), the jobs the page submitted cancelled afterwards."""
    submitted: list[str] = []
    try:
        return run_page(site, page, workdir or page_dir(site), submitted, plain)
    finally:
        cancel(submitted)
