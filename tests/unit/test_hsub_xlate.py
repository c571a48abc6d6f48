"""#PBS and #BSUB lines as sbatch translates them, and SBATCH_* flags as sbatch reads them.

Most cases are checked against sbatch's own reading in tests/fixtures/sbatch/jobscripts.json (scripts
25–34 and the env-flag-*, pbs-* and requeue cases); these are the details that recording does not show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hivebatch.errors import HivebatchError
from hivebatch.submit.build import prepare
from hivebatch.submit.options import env_flag_set
from hivebatch.submit.xlate import translate


def prep(tmp_path: Path, body: str, argv: tuple[str, ...] = (), env: dict[str, str] | None = None):
    path = tmp_path / "job.sh"
    path.write_text(body)
    return prepare(
        [*argv, str(path)], environ=env or {}, stdin_read=None, check_config=False, default_vc="cv"
    )


@pytest.mark.parametrize(
    ("value", "sets"),
    [("", True), ("yes", True), ("YES", True), ("1", True), (" 7", True), ("-1", True), ("+3", True),
     ("007", True), ("0", False), ("no", False), ("2x", False), ("off", False), ("true", False),
     (" ", False), ("0x1", False), ("00", False)],
)  # fmt: skip
def test_a_flags_variable_sets_it_as_sbatch_reads_it(value: str, sets: bool) -> None:
    assert env_flag_set(value) is sets


def test_a_flags_variable_of_0_undoes_the_scripts_flag(tmp_path: Path) -> None:
    # seen on the lab: SBATCH_NO_REQUEUE=0 over `#SBATCH --no-requeue` gave Requeue=1 under sbatch and
    # Requeue=0 under hsub; SBATCH_WAIT=0 made hsub wait for the job's end, sbatch returned at once
    body = "#!/bin/bash\n#SBATCH --no-requeue\n#SBATCH --wait\ntrue\n"
    sub = prep(tmp_path, body, env={"SBATCH_NO_REQUEUE": "0", "SBATCH_WAIT": "0"})
    assert "--requeue" in sub.sbatch_args and "--no-requeue" not in sub.sbatch_args
    assert not sub.wait and not sub.attached
    assert prep(tmp_path, body).wait


def test_the_last_of_requeue_and_no_requeue_decides(tmp_path: Path) -> None:
    # one field in sbatch: `--no-requeue --requeue` gave Requeue=1 under sbatch and 0 under hsub
    body = "#!/bin/bash\ntrue\n"
    assert "--no-requeue" not in prep(tmp_path, body, ("--no-requeue", "--requeue")).sbatch_args
    assert "--no-requeue" in prep(tmp_path, body, ("--requeue", "--no-requeue")).sbatch_args
    sub = prep(tmp_path, "#!/bin/bash\n#SBATCH --requeue\ntrue\n", env={"SBATCH_NO_REQUEUE": "1"})
    assert "--no-requeue" in sub.sbatch_args


def test_two_memory_options_are_refused_in_sbatchs_words(tmp_path: Path) -> None:
    with pytest.raises(HivebatchError, match=r"^--mem, --mem-per-cpu, and --mem-per-gpu are mutually"):
        prep(tmp_path, "#!/bin/bash\n#SBATCH --mem-per-cpu=1G\ntrue\n", ("--mem=4G",))
    with pytest.raises(
        HivebatchError, match=r"^SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and SLURM_MEM_PER_NODE"
    ):
        prep(tmp_path, "#!/bin/bash\ntrue\n", env={"SBATCH_MEM_PER_NODE": "2G", "SBATCH_MEM_PER_CPU": "1G"})


def test_output_is_appended_unless_the_user_chose(tmp_path: Path) -> None:
    assert "--open-mode=append" in prep(tmp_path, "#!/bin/bash\ntrue\n").sbatch_args
    sub = prep(tmp_path, "#!/bin/bash\n#SBATCH --open-mode=truncate\ntrue\n")
    assert "--open-mode=append" not in sub.sbatch_args and sub.directives == ["--open-mode=truncate"]
    sub = prep(tmp_path, "#!/bin/bash\ntrue\n", env={"SBATCH_OPEN_MODE": "truncate"})
    assert "--open-mode=append" not in sub.sbatch_args and sub.env["SBATCH_OPEN_MODE"] == "truncate"


def test_a_torque_script_runs_with_its_gpus_and_sbatch_does_not_read_its_lines_again(tmp_path: Path) -> None:
    # seen on the lab: sbatch took `#PBS -l nodes=1:ppn=2:gpus=2`, hsub sent --gpus=1 beside it and Slurm
    # refused the job ("Failed to ensure --gpus >= --gres=gpu/--gpus-per-node")
    body = "#!/bin/bash\n#PBS -N pbsjob\n#PBS -l nodes=1:ppn=2:gpus=2\n#PBS -l walltime=00:05:00\ntrue\n"
    sub = prep(tmp_path, body)
    assert (sub.request.gpus, sub.request.nodes, sub.job_name) == (2, 1, "pbsjob")
    assert sub.request.time_limit_s == 300
    assert sub.sbatch_args[-1] == "--ignore-pbs"  # the job script holds the user's #PBS lines
    assert sub.directives == ["--nodes=1", "--ntasks=2"]
    assert "--ignore-pbs" not in prep(tmp_path, "#!/bin/bash\ntrue\n").sbatch_args


def test_ignore_pbs_from_any_source_keeps_the_lines_unread(tmp_path: Path) -> None:
    body = "#!/bin/bash\n#PBS -N pbsjob\ntrue\n"
    assert prep(tmp_path, body).job_name == "pbsjob"
    assert prep(tmp_path, body, ("--ignore-pbs",)).job_name == "job.sh"
    assert prep(tmp_path, "#!/bin/bash\n#SBATCH --ignore-pbs\n#PBS -N pbsjob\ntrue\n").job_name == "job.sh"
    assert prep(tmp_path, body, env={"SBATCH_IGNORE_PBS": "1"}).job_name == "job.sh"
    assert prep(tmp_path, body, env={"SBATCH_IGNORE_PBS": "0"}).job_name == "pbsjob"


def test_umask_reaches_the_job_as_sbatch_sets_it(tmp_path: Path) -> None:
    body = "#!/bin/bash\n#PBS -W umask=027\ntrue\n"
    assert prep(tmp_path, body).env["SLURM_UMASK"] == "0027"
    assert prep(tmp_path, "#!/bin/bash\n#PBS -W UMASK=0x3f\ntrue\n").env["SLURM_UMASK"] == "0077"
    assert prep(tmp_path, body, env={"SLURM_UMASK": "0002"}).env["SLURM_UMASK"] == "0002"  # sbatch keeps it
    with pytest.raises(HivebatchError, match="Invalid -W umask= specification"):
        prep(tmp_path, "#!/bin/bash\n#PBS -W umask=1000\ntrue\n")


def test_lsf_details() -> None:
    # LSF's memory unit is KB (seen on the lab: `#BSUB -M 100` gave MinMemoryCPU=1M)
    assert translate("#!/bin/sh\n#BSUB -M 100\n").words == ["--mem-per-cpu=100K"]
    assert translate("#!/bin/sh\n#BSUB -M 2G\n").words == ["--mem-per-cpu=2G"]
    # -cwd is renamed only where an option stands: as a value it stays a job name
    assert translate("#!/bin/sh\n#BSUB -cwd /scratch -J -cwd\n").words == [
        "--chdir=/scratch",
        "--job-name=-cwd",
    ]
    assert translate('#!/bin/sh\n#BSUB -m "node1 node2"\n').words == ["--nodelist=node1,node2"]
    assert translate("#!/bin/sh\n#BSUB -n 2,\n").problems == ["#BSUB -n format not correct given: '2,'"]


def test_torque_node_specs_add_up_as_in_sbatch() -> None:
    words = translate("#!/bin/sh\n#PBS -l nodes=2:ppn=4+3:ppn=2\n").words
    assert words == ["--nodes=5", "--ntasks=30"]  # ppn summed, times the node count
    assert translate("#!/bin/sh\n#PBS -l nodes=node2+node3:ppn=1\n").words == [
        "--ntasks=1",
        "--nodelist=node2,node3",
    ]


def test_resource_list_values() -> None:
    assert translate("#!/bin/sh\n#PBS -l naccelerators=0\n").problems == [
        'Invalid numeric value "0" for naccelerators.'
    ]
    # a GPU count adds to the --gres the #SBATCH lines gave (seen on the lab: TresPerNode=gres:gpu:1,gres:gpu:2)
    assert translate("#!/bin/sh\n#PBS -l naccelerators=2\n", {"gres": "gpu:1"}).words == [
        "--gres=gpu:1,gpu:2"
    ]
    assert translate("#!/bin/sh\n#PBS -v B=2\n", {"export": "ALL"}).words == ["--export=ALL,B=2"]
    assert translate("#!/bin/sh\n#PBS -m n\n#PBS -m ae\n").words == [
        "--mail-type=NONE",
        "--mail-type=END,FAIL",
    ]


def test_reading_stops_at_the_hundred_and_first_line_that_is_not_a_comment() -> None:
    # checked on the lab with sbatch --test-only -v: "read", then "still-read"
    lines = ["#!/bin/sh", *["true"] * 100, "#PBS -N read", "true", "#PBS -N too-late"]
    assert translate("\n".join(lines)).words == ["--job-name=read"]
    lines = ["#!/bin/sh", *["true"] * 99, "#PBS -N read", "true", "#PBS -N still-read"]
    assert translate("\n".join(lines)).words == ["--job-name=read", "--job-name=still-read"]


def test_bsub_lines_are_read_instead_of_pbs_lines() -> None:
    t = translate("#!/bin/sh\n#PBS -N pbs\n#BSUB -J lsf\n")
    assert (t.kind, t.words) == ("#BSUB", ["--job-name=lsf"])
    assert translate("#!/bin/sh\ntrue\n").kind is None


def test_hsub_runs_sbatch_with_the_translated_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    import hivebatch.slurm
    from hivebatch.cli.hsub.main import run
    from hivebatch.slurm.cli import CliBackend, Completed

    seen: list[dict[str, str]] = []

    def sbatch(argv: list[str], stdin: str | None, env: dict[str, str]) -> Completed:
        seen.append(dict(os.environ))  # the real runner gives sbatch this process's environment
        return Completed(0, "105\n", "")

    monkeypatch.setattr(hivebatch.slurm, "get_backend", lambda *a, **k: CliBackend(sbatch))
    monkeypatch.setattr(os, "environ", {"PATH": "/usr/bin:/bin", "SBATCH_GPUS": "4", "SBATCH_WCKEY": "w"})
    config = tmp_path / "hivebatch.yaml"
    config.write_text((Path(__file__).resolve().parents[2] / "etc" / "hivebatch.example.yaml").read_text())
    (tmp_path / "job.sh").write_text("#!/bin/sh\n#PBS -W umask=077\ntrue\n")
    assert run(["--config", str(config), "-A", "nlp", str(tmp_path / "job.sh")]) == 0
    assert capsys.readouterr().out == "Submitted batch job 105\n"
    assert seen == [{"PATH": "/usr/bin:/bin", "SBATCH_WCKEY": "w", "SLURM_UMASK": "0077"}]
