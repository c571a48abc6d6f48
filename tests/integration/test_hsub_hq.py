"""hsub, hq and the sbatch wrapper on the real Slurm lab, run as the lab's users."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_site import Site, lab_site

from hivebatch.request import request_of

PROJECT = Path(__file__).resolve().parents[2]
VENV_BIN = PROJECT / ".venv" / "bin"
SCRIPT = '#!/bin/bash\necho "demo: host=$(hostname) gpus=${CUDA_VISIBLE_DEVICES:-none} args=$*"\nsleep ${SLEEP:-1}\n'


@pytest.fixture(scope="module")
def site(slurm_lab) -> Iterator[Site]:  # type: ignore[no-untyped-def]
    with lab_site(slurm_lab) as private:
        yield private


def write_script(site: Site, name: str = "job.sh", body: str = SCRIPT) -> Path:
    path = site.dir / name
    path.write_text(body)
    path.chmod(0o755)
    return path


def submit(site: Site, user: str, lab_jobs: list[int], *args: str) -> int:
    proc = site.as_user(user, "hsub", "--parsable", *args)
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout.strip())
    lab_jobs.append(job_id)
    return job_id


def test_hsub_job_is_held_by_slurm_with_the_request_in_its_admin_comment(
    site: Site, slurm_lab, lab_jobs
) -> None:  # type: ignore[no-untyped-def]
    script = write_script(site)
    job_id = submit(site, "alice", lab_jobs, "-A", "cv", "-q", "prior", "--gpus", "2", "-t", "5",
                    "-o", str(site.dir / "out-%j.txt"), str(script), "x y")  # fmt: skip
    job = slurm_lab.wait_for(job_id, ["PENDING"], held=True)
    assert job.user == "alice" and job.account == "cv" and job.qos == "prior"
    assert "gpu" not in job.tres_per_node and not job.gpus
    req = request_of(job)
    assert req is not None
    assert (req.vc, req.qos, req.gpus, req.time_limit_s) == ("cv", "prior", 2, 300)


def test_hsub_shows_the_notes_sbatch_shows_on_acceptance(site: Site, slurm_lab, lab_jobs) -> None:  # type: ignore[no-untyped-def]
    # sbatch printed the job_submit plugin's note (tests/fixtures/slurm/exclusive_user.txt); hsub kept
    # sbatch's stderr to itself
    script = write_script(site)
    proc = site.as_user("alice", "hsub", "--parsable", "-A", "cv", "--gres=gpu:1", "--exclusive=user", "-t", "5",
                        "-o", "/dev/null", str(script))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lab_jobs.append(int(proc.stdout.strip()))
    assert proc.stderr.splitlines() == [
        "hsub: note: --exclusive=user keeps other users' jobs off the job's nodes, so here it takes them whole,"
        " with all their GPUs"
    ]


def test_alice_cannot_submit_into_bobs_vc(site: Site, slurm_lab) -> None:  # type: ignore[no-untyped-def]
    script = write_script(site)
    before = {j.job_id for j in slurm_lab.backend().list_jobs()}
    proc = site.as_user("alice", "hsub", "-A", "nlp", "--gpus", "1", str(script))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "may not submit into virtual cluster 'nlp'" in lines[0], proc.stderr
    after = [
        j
        for j in slurm_lab.backend().list_jobs()
        if j.job_id not in before and j.user == "alice" and j.account == "nlp"
    ]
    assert after == []


def test_bad_requests_never_reach_slurm(site: Site, slurm_lab) -> None:  # type: ignore[no-untyped-def]
    script = write_script(site)
    before = {j.job_id for j in slurm_lab.backend().list_jobs()}
    for args, message in [
        (["-A", "nosuch"], "unknown virtual cluster 'nosuch'"),
        (["-A", "sys", "--gpus", "8"], "holds at most 4"),
        (["-A", "cv", "-t", "soon"], "not a Slurm time"),
        (["-A", "cv", "--model", "nosuchnet", "--batch-size", "8", "--iters", "5"], "nosuchnet"),
    ]:
        proc = site.as_user("alice", "hsub", *args, str(script))
        assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert {j.job_id for j in slurm_lab.backend().list_jobs()} - before == set()


def test_bob_cannot_cancel_alices_job(site: Site, slurm_lab, lab_jobs) -> None:  # type: ignore[no-untyped-def]
    job_id = submit(site, "alice", lab_jobs, "-A", "cv", "--wrap", "sleep 1")
    slurm_lab.wait_for(job_id, ["PENDING"], held=True)
    proc = slurm_lab.run("bob", ["scancel", str(job_id)], check=False)
    assert proc.returncode != 0 or "denied" in proc.stderr.lower()
    time.sleep(0.5)
    assert slurm_lab.backend().list_jobs([job_id])[0].state == "PENDING"


def test_hq_before_the_controller_ran(site: Site, slurm_lab, lab_jobs) -> None:  # type: ignore[no-untyped-def]
    fresh = site.dir / "fresh.yaml"
    fresh.write_text(site.config.read_text().replace("hivebatch.db", "never-created.db"))
    fresh.chmod(0o644)
    job_id = submit(site, "carol", lab_jobs, "-A", "sys", "--gpus", "2", "--wrap", "true")
    proc = site.as_user("carol", "hq", "--me", "--json", extra_env={"HIVEBATCH_CONFIG": str(fresh)})
    assert proc.returncode == 0, proc.stderr
    rows = {r["job_id"]: r for r in json.loads(proc.stdout)}
    row = rows[job_id]
    assert (row["user"], row["vc"], row["qos"], row["gpus"], row["state"]) == (
        "carol",
        "sys",
        "normal",
        2,
        "PENDING",
    )
    assert "controller" in row["reason"]
    assert not (site.dir / "db" / "never-created.db").exists()  # readers never create the ledger


def test_hq_passes_squeues_own_refusal_on_as_one_line(site: Site) -> None:
    proc = site.as_user("alice", "hq", "-j", "abc")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("hq: error:") and "Invalid job id: abc" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_full_path_alices_two_gpu_job_runs_on_the_chosen_gpus(site: Site, slurm_lab, lab_jobs) -> None:  # type: ignore[no-untyped-def]
    script = write_script(site, "two.sh")
    job_id = submit(site, "alice", lab_jobs, "-A", "cv", "--gpus", "2", "-o", str(site.dir / "two-%j.out"),
                    str(script), "hello world")  # fmt: skip
    test_only = site.as_user("alice", "hsub", "-A", "cv", "--gpus", "2", "--test-only", str(script))
    assert test_only.returncode == 0 and re.search(
        r"would (start now on node\d:\[\d,\d\]|wait)", test_only.stdout
    ), test_only
    deadline = time.monotonic() + 120
    row = None
    while time.monotonic() < deadline:
        site.controller_once()
        proc = site.as_user("alice", "hq", "--json", "-t", "all", "-j", str(job_id))
        assert proc.returncode == 0, proc.stderr
        row = json.loads(proc.stdout)[0]
        if row["state"] in ("COMPLETED", "FAILED", "CANCELLED"):
            break
        time.sleep(1)
    assert row is not None and row["state"] == "COMPLETED", row
    out = (site.dir / f"two-{job_id}.out").read_text()
    host, gpus, args = re.search(r"demo: host=(\S+) gpus=(\S+) args=(.*)", out).groups()  # type: ignore[union-attr]
    assert args == "hello world"
    assert len(row["placement"]) == 1 and sorted(row["placement"][host]) == [int(g) for g in gpus.split(",")]
    assert row["vc"] == "cv" and row["user"] == "alice" and row["gpus"] == 2

    plain = site.as_user("alice", "hq", "-t", "all", "-j", str(job_id), "-o", "%i %u %{vc} %{placement}")
    placed = " ".join(f"{n}:[{','.join(map(str, sorted(g)))}]" for n, g in row["placement"].items())
    assert plain.stdout.splitlines()[1].split() == [str(job_id), "alice", "cv", placed]
    vc = site.as_user("alice", "hq", "vc", "cv", "--json")
    assert vc.returncode == 0 and json.loads(vc.stdout)["gpus_total"] == 12


def test_hq_reads_a_postgresql_ledger(site: Site, slurm_lab, lab_jobs) -> None:  # type: ignore[no-untyped-def]
    """The ledger on PostgreSQL (read through SQLAlchemy, read-only) shows the same as on SQLite."""
    import datetime as dt

    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.orm import Session

    from hivebatch.db import make_engine, migrate
    from hivebatch.db.models import Job

    base_url = os.environ.get("HIVEBATCH_TEST_PG_URL")
    if not base_url:
        pytest.fail("HIVEBATCH_TEST_PG_URL is not set: run the integration tests through scripts/test")
    base = make_url(base_url).set(drivername="postgresql+psycopg")
    name = f"hbhq_{uuid.uuid4().hex[:10]}"
    admin = make_engine(base.render_as_string(hide_password=False)).execution_options(
        isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = base.set(database=name).render_as_string(hide_password=False)
    try:
        engine = make_engine(url)
        migrate.upgrade(engine)
        job_id = submit(site, "bob", lab_jobs, "-A", "nlp", "--gpus", "2", "--wrap", "true")
        t = dt.datetime(2026, 1, 1, 12, 0)
        with Session(engine) as s:
            s.add(Job(slurm_job_id=job_id, name="wrap", user="bob", account="nlp", vc_name="nlp", qos="normal",
                      gpus=2, state="queued", reason="VC nlp is busy: 16 of 16 GPUs in use",
                      predicted_start=t, submit_time=t))  # fmt: skip
            s.commit()
        engine.dispose()
        proc = site.as_user("bob", "hq", "--me", "--json", extra_env={"HIVEBATCH_DATABASE_URL": url})
        assert proc.returncode == 0, proc.stderr
        row = next(r for r in json.loads(proc.stdout) if r["job_id"] == job_id)
        assert row["hivebatch_state"] == "queued" and row["reason"] == "VC nlp is busy: 16 of 16 GPUs in use"
        assert row["predicted_start"] == "2026-01-01T12:00:00Z" and row["vc"] == "nlp"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# --- real-world job scripts: hsub --dry-run and the live sbatch --test-only agree, as alice ---


def _fidelity() -> Any:
    import importlib.util
    import sys

    sys.path.insert(0, str(PROJECT / "tests" / "unit"))
    import test_hsub_sbatch_fidelity as fidelity

    path = fidelity.SCRIPTS.parent / "sbatch" / "record.py"
    spec = importlib.util.spec_from_file_location("record_sbatch", path)
    assert spec and spec.loader
    fidelity.recorder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fidelity.recorder)
    return fidelity


FIDELITY = _fidelity()


@pytest.fixture(scope="module")
def jobscripts(site: Site) -> Path:
    """The job scripts where alice can read them."""
    where = site.dir / "jobscripts"
    shutil.copytree(FIDELITY.SCRIPTS, where, dirs_exist_ok=True)
    where.chmod(0o755)
    for p in where.iterdir():
        p.chmod(0o644)
    return where


@pytest.mark.parametrize("name", sorted(FIDELITY.RECORDED))
def test_hsub_and_sbatch_agree_on_real_job_scripts(
    name: str, site: Site, jobscripts: Path, slurm_lab
) -> None:  # type: ignore[no-untyped-def]
    case = FIDELITY.RECORDED[name]
    script = jobscripts / FIDELITY.case_script(name).name
    args, env = case.get("args", []), case.get("env", {})
    live = FIDELITY.recorder.sbatch_reads(script, args=args, extra_env=env)
    dry = site.as_user("alice", "hsub", "--dry-run", *args, str(script), extra_env=env)
    assert (dry.returncode == 0) == (live["returncode"] == 0), dry.stderr + str(live["errors"])
    if live["returncode"] == 0:
        parsed, _ = FIDELITY.hsub_reads(name)
        ours = FIDELITY.sbatch_names(parsed)
        assert set(ours) - {"verbose"} == set(live["options"])
        for option in set(live["options"]) & FIDELITY.VERBATIM:
            assert FIDELITY.same_value(option, ours[option], live["options"][option]), option


#: what hsub writes itself (the GPU ask and its shape, the requeue choice, appended output) or adds
#: (the job script's #PBS lines are read once, by hsub)
HSUB_OWN = frozenset(["gpus", "gpus-per-node", "gres", "nodes", "requeue", "no-requeue", "open-mode",
                      "ignore-pbs", "comment", "verbose", "test-only"])  # fmt: skip


@pytest.mark.parametrize("name", sorted(n for n, c in FIDELITY.RECORDED.items() if c["returncode"] == 0))
def test_sbatch_reads_hsubs_submission_as_it_reads_the_users(
    name: str, site: Site, jobscripts: Path, slurm_lab
) -> None:  # type: ignore[no-untyped-def]
    """The generated job script, arguments and environment, given to the live sbatch: every option
    but hsub's own comes out as sbatch reads it from the user's script, command line and variables
    (each option stays where the user gave it, and sbatch judges some by that)."""
    from hivebatch.submit.build import prepare

    case = FIDELITY.RECORDED[name]
    script = jobscripts / FIDELITY.case_script(name).name
    args, env = case.get("args", []), case.get("env", {})
    live = FIDELITY.recorder.sbatch_reads(script, args=args, extra_env=env)
    sub = prepare([*args, str(script)], environ=env, stdin_read=None, check_config=False, default_vc="cv")
    proc = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--test-only", "-v", *sub.sbatch_args],
                          input=sub.job_script().encode("utf-8", "surrogateescape"), capture_output=True,
                          cwd="/tmp", timeout=60, check=False,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": os.environ["SLURM_CONF"],
                               **sub.env})  # fmt: skip
    ours = FIDELITY.recorder.parse_sbatch_output(proc.returncode, proc.stderr.decode("latin-1"))
    assert ours["returncode"] == 0, ours["errors"]
    theirs = {k: v for k, v in live["options"].items() if k not in HSUB_OWN}
    mine = {k: v for k, v in ours["options"].items() if k not in HSUB_OWN}
    # sbatch names a job after its script; hsub's script comes on sbatch's standard input, so hsub names it
    assert mine.pop("job-name") == theirs.pop("job-name", script.name)
    assert mine == theirs


# --- hq answers squeue's options with squeue's bytes, plus hivebatch's columns ---

SQUEUE_CASES = [
    ["-o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"],
    ["-O", "JobID,Partition,Name,UserName,StateCompact,NumNodes,ReasonList"],
    ["-l", "-O", "JobID:8 ,StateCompact:4 ,ReasonList:0"],  # a format of its own: squeue's
    ["--start", "-o", "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"],  # a format of its own: squeue's
    ["-p", "gpu", "-o", "%i %P %t"],
    ["-t", "PD", "-o", "%A %i %r"],
    ["-S", "-i", "-o", "%i %Q"],
    ["-n", "hq-fidelity-held", "-o", "%i %j"],
    ["-w", "node1,node2", "-o", "%i %N"],
    ["-r", "-o", "%i %K"],
    ["-u", "alice", "-A", "cv", "-q", "normal", "-o", "%i %u %a %q"],
    ["-a", "-h", "-o", "%i"],
    ["--array-unique", "--noheader", "--format=%i"],
    ["--me", "-o", "%i %u"],
]


@pytest.fixture(scope="module")
def squeue_jobs(site: Site, slurm_lab) -> Iterator[list[int]]:  # type: ignore[no-untyped-def]
    """A held array, a held job and a running CPU job of alice's, submitted with plain sbatch."""
    path = write_script(site, "sleep.sh", "#!/bin/bash\nsleep 300\n")
    ids = []
    for args in (["-H", "-a", "1-3"], ["-H", "-J", "hq-fidelity-held"], ["-J", "hq-fidelity-cpu"]):
        proc = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "-A", "cv", *args, str(path)],
                              capture_output=True, text=True, env=site.env(), cwd=site.dir, timeout=60, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        ids.append(int(proc.stdout.strip().split(";")[0]))
    time.sleep(1)
    yield ids
    for jid in ids:
        subprocess.run(["scancel", str(jid)], capture_output=True, check=False, timeout=30)


def _both(site: Site, args: list[str]) -> tuple[str, str]:
    hq = site.as_user("alice", "hq", *args)
    squeue = subprocess.run(["runuser", "-u", "alice", "--", "squeue", *args], capture_output=True, text=True,
                            env=site.env(), cwd=site.dir, timeout=60, check=False)  # fmt: skip
    assert hq.returncode == squeue.returncode == 0, hq.stderr + squeue.stderr
    return hq.stdout, squeue.stdout


@pytest.mark.parametrize("args", SQUEUE_CASES, ids=lambda a: " ".join(a))
def test_hq_output_is_squeues_byte_for_byte(args: list[str], site: Site, squeue_jobs: list[int]) -> None:
    for _ in range(3):  # a clock field (TIME, the -l date) may tick between the two calls
        ours, theirs = _both(site, args)
        if ours == theirs:
            break
        time.sleep(0.3)
    assert ours == theirs


@pytest.mark.parametrize(
    "env",
    [{"SQUEUE_NAMES": "hq-fidelity-held"}, {"SQUEUE_STATES": "R"}, {"SQUEUE_SORT": "-i"}, {"SQUEUE_ARRAY": ""},
     {"SQUEUE_USERS": "bob"}, {"SQUEUE_ACCOUNT": "cv", "SQUEUE_STATES": "PD"}],
    ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()),
)  # fmt: skip
def test_hq_lists_the_jobs_squeue_lists_under_squeues_variables(
    env: dict[str, str], site: Site, squeue_jobs: list[int]
) -> None:
    # seen on the lab: `SQUEUE_USERS=bob hq` listed alice's jobs too (tests/fixtures/squeue/env_selection.txt)
    hq = site.as_user("alice", "hq", "-h", extra_env=env)
    squeue = subprocess.run(["runuser", "-u", "alice", "--", "squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                            env={**site.env(), **env}, cwd=site.dir, timeout=60, check=False)  # fmt: skip
    assert hq.returncode == squeue.returncode == 0, hq.stderr + squeue.stderr
    ours, theirs = [ln.split()[0] for ln in hq.stdout.splitlines()], squeue.stdout.split()
    if "SQUEUE_SORT" not in env:  # unsorted, hq's view lists running jobs, then by predicted start
        ours, theirs = sorted(ours), sorted(theirs)
    assert ours == theirs


@pytest.mark.parametrize("option", ["--start", "-l"])
def test_hq_start_and_long_are_squeues_with_hivebatchs_reasons(
    option: str, site: Site, squeue_jobs: list[int]
) -> None:
    path = write_script(site, "gpu.sh", "#!/bin/bash\nsleep 300\n")
    gpu = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "-A", "cv", "--gres=gpu:1", "-t", "5",
                          str(path)], capture_output=True, text=True, env=site.env(), cwd=site.dir, timeout=60,
                         check=False)  # fmt: skip
    assert gpu.returncode == 0, gpu.stderr
    try:
        _compare_with_reasons(site, option, gpu.stdout.strip())
    finally:
        subprocess.run(["scancel", gpu.stdout.strip()], capture_output=True, check=False, timeout=30)


def _compare_with_reasons(site: Site, option: str, gpu_job: str) -> None:
    for _ in range(3):  # -l's date line and TIME may tick between the two calls
        ours, theirs = _both(site, [option])
        mine, their_lines = ours.splitlines(), theirs.splitlines()
        # every column squeue prints, but the reason of a job the plugin holds
        kept = [line.rsplit("(", 1)[0] for line in mine]
        if kept == [line.rsplit("(", 1)[0] for line in their_lines]:
            break
        time.sleep(0.3)
    assert kept == [line.rsplit("(", 1)[0] for line in their_lines], (ours, theirs)
    # squeue says only the hold the plugin keeps the GPU job in, hq why it waits; a CPU job's reason
    # (alice's own holds of the module's jobs) stays squeue's
    (theirs_gpu,) = [line for line in their_lines if line.split()[0] == gpu_job]
    (mine_gpu,) = [line for line in mine if line.split()[0] == gpu_job]
    assert theirs_gpu.endswith("(JobHeldUser)") and mine_gpu.endswith(
        "(waiting for the hivebatch controller to look at it)"
    )
    assert [line for line in mine if line.split()[0] != gpu_job] == [
        line for line in their_lines if line.split()[0] != gpu_job
    ]


def test_hq_adds_hivebatch_columns_to_squeues(site: Site, squeue_jobs: list[int]) -> None:
    ours, _ = _both(site, ["-o", "%.10i|%{vc}|%.8u|%.12{placement}|%t"])
    _, theirs = _both(site, ["-o", "%.10i|%.8u|%t"])
    lines = [line.split("|") for line in ours.splitlines()]
    assert [[c[0], c[2], c[4]] for c in lines] == [line.split("|") for line in theirs.splitlines()]
    assert lines[0][1] == "VC" and {c[1] for c in lines[1:]} == {"cv"}
    assert lines[0][3].strip() == "PLACEMENT"  # filled for placed GPU jobs (test_full_path_… checks one)
    array = site.as_user("alice", "hq", "-h", "-j", f"{squeue_jobs[0]}_2", "-o", "%i %{vc}")
    assert array.stdout == f"{squeue_jobs[0]}_2 cv\n"


def test_a_job_named_in_latin1_stops_neither_the_controller_nor_hq(site: Site, slurm_lab, lab_jobs) -> None:  # type: ignore[no-untyped-def]
    """Slurm keeps a job's name as the bytes sbatch got (tests/fixtures/slurm/squeue_latin1_name.json): one
    carol named in Latin-1 stopped every controller cycle, so nobody's GPU job was placed, and every hq."""
    held = subprocess.run(["runuser", "-u", "carol", "--", "sbatch", "--parsable", "--hold", "-J", "caf\udce9",
                           "-o", "/dev/null", "--wrap", "sleep 60"], capture_output=True, timeout=60, check=False)  # fmt: skip
    assert held.returncode == 0, held.stderr
    carols = int(held.stdout.split(b";")[0])
    lab_jobs.append(carols)
    script = write_script(site, "latin1.sh")
    job_id = submit(site, "alice", lab_jobs, "-A", "cv", "--gpus", "1", "-o", "/dev/null", str(script))
    site.controller_once()
    proc = site.as_user("alice", "hq", "--json", "-t", "all", "-j", f"{carols},{job_id}")
    assert proc.returncode == 0, proc.stderr
    rows = {row["job_id"]: row for row in json.loads(proc.stdout)}
    assert rows[carols]["name"] == "caf\ufffd", rows[carols]
    assert rows[job_id]["placement"], rows[job_id]
    listing = site.as_user("bob", "hq", "-t", "all")
    assert listing.returncode == 0 and "caf\ufffd" in listing.stdout, listing.stderr


@pytest.mark.parametrize(
    ("ask", "refusal"),
    [
        (["-w", "nodeX"], "Slurm refused the job: allocation failure: Invalid node name specified"),
        (
            ["--mem=500G"],
            "hivebatch: the job needs 512000 MB of memory on one node, but the largest node with GPUs",
        ),
    ],
)
def test_hsub_test_only_refuses_what_sbatch_test_only_refuses(
    site: Site, ask: list[str], refusal: str
) -> None:
    script = write_script(site, "judged.sh")
    live = site.as_user("alice", "hsub", "-A", "cv", "--gpus", "1", *ask, "--test-only", str(script))
    assert live.returncode == 1 and live.stdout == "", live
    assert live.stderr.startswith(f"hsub: error: {refusal}") and len(live.stderr.splitlines()) == 1, (
        live.stderr
    )


def test_hsub_quiet_and_wait_show_what_sbatch_shows(site: Site, slurm_lab, lab_jobs) -> None:  # type: ignore[no-untyped-def]
    # plain sbatch on the lab: tests/fixtures/slurm/sbatch_quiet_wait.txt
    script = write_script(site, "exit3.sh", "#!/bin/bash\nsleep 2\nexit 3\n")
    name = f"quiet-{uuid.uuid4().hex[:8]}"
    quiet = site.as_user("alice", "hsub", "-Q", "-J", name, "--gpus=1", "-o", "/dev/null", str(script))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    listed = subprocess.run(
        ["squeue", "-h", "-n", name, "-o", "%i %u"], capture_output=True, text=True, check=True
    )
    job, user = listed.stdout.split()
    lab_jobs.append(int(job))
    assert user == "alice"

    exe = str(site.user_bin / "hsub")
    waiting = subprocess.Popen(["runuser", "-u", "alice", "--", exe, "--wait", "--gpus=1", "-o", "/dev/null", str(script)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=site.env(), cwd=site.dir)  # fmt: skip
    deadline = time.monotonic() + 120
    while waiting.poll() is None and time.monotonic() < deadline:
        site.controller_once()  # places it; sbatch --wait returns once the job has ended
        time.sleep(1)
    if waiting.poll() is None:
        waiting.kill()
    out, err = waiting.communicate()
    assert waiting.returncode == 3, (out, err)
    assert re.fullmatch(r"Submitted batch job \d+\n", out), (out, err)
    lab_jobs.append(int(out.split()[-1]))
