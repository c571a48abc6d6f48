"""--kill-on-invalid-dep under hivebatch: a held job whose dependency can never be met and that asked to be
cancelled then is released for Slurm to cancel at its next pass, as plain Slurm cancels it at once,
instead of at Slurm's re-test of held jobs a minute later (tests/fixtures/slurm/kill_invalid_dep.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hivebatch.slurm.parse import parse_squeue_json
from tests.unit.controller_support import Env, make_env


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


def test_squeue_shows_what_the_job_asked(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    jobs = {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue_kill_invalid_dep.json"))}
    assert jobs[1676].kill_invalid_dep is True  # --kill-on-invalid-dep=yes
    assert jobs[1677].kill_invalid_dep is False  # --kill-on-invalid-dep=NO
    assert jobs[1675].kill_invalid_dep is None  # left to the site's DependencyParameters


def _chain(env: Env, *kill: str) -> tuple[int, list[int]]:
    first = env.submit("alice", "cv", 1)
    env.cycle()
    after = [
        env.submit("alice", "cv", 1, extra=[f"--dependency=afterok:{first}", *([k] if k else [])])
        for k in kill
    ]
    env.cycle()
    return first, after


def test_a_job_that_asked_is_cancelled_once_its_dependency_fails(env: Env) -> None:
    first, (doomed, kept, unsaid) = _chain(env, "--kill-on-invalid-dep=yes", "--kill-on-invalid-dep=no", "")
    assert env.job(doomed).reason.startswith(f"waits for its dependency afterok:{first}")
    env.slurm.fail(first)
    env.cycle()
    assert env.slurm.job(doomed).state == "CANCELLED"
    assert env.slurm.job(doomed).reason == "DependencyNeverSatisfied"
    [event] = env.events(doomed, kind="dependency_never")
    assert "--kill-on-invalid-dep=yes" in event.message
    env.cycle()
    assert env.job(doomed).state == "cancelled"
    for job in (kept, unsaid):  # waits for its owner, as on plain Slurm
        assert env.slurm.job(job).state == "PENDING"
        assert env.job(job).reason.startswith(f"its dependency afterok:{first} can never be met: cancel it")


def test_a_job_released_for_slurm_to_cancel_is_not_held_again_before_slurm_does(env: Env) -> None:
    first, (doomed,) = _chain(env, "--kill-on-invalid-dep=yes")
    env.slurm.fail(first)
    env.slurm._s.auto_schedule = False  # slurmctld's next pass has not come yet
    env.cycle()
    assert not env.slurm.job(doomed).held
    env.cycle()
    assert not env.slurm.job(doomed).held and not env.events(doomed, kind="held")
    env.slurm.schedule()
    assert env.slurm.job(doomed).state == "CANCELLED"


def test_a_job_its_owner_holds_keeps_their_hold(env: Env) -> None:
    first, (doomed,) = _chain(env, "--kill-on-invalid-dep=yes")
    env.slurm.as_user("alice").user_hold(doomed)
    env.cycle()
    env.slurm.fail(first)
    env.cycle()
    assert env.slurm.job(doomed).state == "PENDING" and env.slurm.job(doomed).held
    assert not env.events(doomed, kind="dependency_never")


def test_sbatch_refuses_what_it_cannot_read(env: Env) -> None:
    from hivebatch.slurm.types import SlurmError

    with pytest.raises(SlurmError, match="Invalid --kill-on-invalid-dep specification"):
        env.submit("alice", "cv", 1, extra=["--kill-on-invalid-dep=maybe"])


def test_the_clusters_setting_decides_for_a_job_that_asked_neither_way(env: Env) -> None:
    # DependencyParameters=kill_invalid_depend (tests/fixtures/slurm/kill_invalid_depend_site.txt)
    env.slurm.set_dependency_params("kill_invalid_depend")
    first, (unsaid, kept) = _chain(env, "", "--kill-on-invalid-dep=no")
    env.slurm.fail(first)
    env.cycle()
    assert env.slurm.job(unsaid).state == "CANCELLED"
    assert env.slurm.job(unsaid).reason == "DependencyNeverSatisfied"
    [event] = env.events(unsaid, kind="dependency_never")
    assert "the cluster's DependencyParameters=kill_invalid_depend" in event.message
    assert env.slurm.job(kept).state == "PENDING"  # its own no outweighs the cluster's setting
    assert env.job(kept).reason.startswith(f"its dependency afterok:{first} can never be met: cancel it")


def test_slurms_configuration_is_asked_only_while_a_job_leaves_it_the_choice(env: Env) -> None:
    from hivebatch.controller.observe import observe

    asked: list[bool] = []
    real = env.slurm.kills_invalid_dependencies
    env.slurm.kills_invalid_dependencies = lambda: asked.append(True) or real()  # type: ignore[method-assign]
    first = env.submit("alice", "cv", 1)
    env.submit("alice", "cv", 1, extra=[f"--dependency=afterok:{first}", "--kill-on-invalid-dep=no"])
    observe(env.slurm)
    assert not asked
    env.submit("alice", "cv", 1, extra=[f"--dependency=afterok:{first}"])
    observe(env.slurm)
    assert asked == [True]


def test_the_cli_backend_reads_the_setting_as_slurmctld_does(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    from hivebatch.slurm.cli import CliBackend, Completed

    lab = slurm_fixture("scontrol_show_config.txt")
    unset = "DependencyParameters    = (null)"
    assert unset in lab
    site = lab.replace(unset, "DependencyParameters    = max_depend_depth=5,Kill_Invalid_Depend")

    def backend(text: str) -> CliBackend:
        return CliBackend(lambda argv, stdin, env: Completed(0, text, ""))

    assert not backend(lab).kills_invalid_dependencies()
    assert backend(site).kills_invalid_dependencies()
