"""hsub's option parsing: sbatch's syntax and precedence, hivebatch's own options, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from hivebatch.errors import HivebatchError
from hivebatch.request import read_hints
from hivebatch.submit.build import build_request, prepare, submit_env
from hivebatch.submit.options import parse_args, parse_directives, parse_env
from hivebatch.submit.timefmt import format_duration, parse_time_option


def script(tmp_path: Path, body: str, name: str = "job.sh") -> str:
    p = tmp_path / name
    p.write_text(body)
    return str(p)


def prep(argv: list[str], env: dict[str, str] | None = None, default_vc: str | None = None):
    return prepare(argv, environ=env or {}, stdin_read=None, check_config=False, default_vc=default_vc)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10", 600),
        ("1:00:00", 3600),
        ("2-0", 2 * 86400),
        ("1-2:03", 86400 + 2 * 3600 + 180),
        ("UNLIMITED", None),
        # tests/fixtures/sbatch/time_limits.txt: seconds round up to a minute, zero is no limit
        ("10:30", 660),
        ("0:30", 60),
        ("1-02:03:04", 86400 + 7200 + 240),
        ("0", None),
        ("00:00:00", None),
        ("0-0", None),
    ],
)
def test_time_formats_follow_slurm(text: str, seconds: int | None) -> None:
    assert parse_time_option(text) == seconds


@pytest.mark.parametrize("bad", ["ten", "1h", "1:2:3:4", "-5", "1-"])
def test_bad_time_is_one_clear_error(bad: str) -> None:
    with pytest.raises(HivebatchError, match="time"):
        parse_time_option(bad)


def test_format_duration() -> None:
    assert format_duration(3661) == "01:01:01"
    assert format_duration(90061) == "1-01:01:01"


def test_short_and_long_forms_parse_alike() -> None:
    a = parse_args(["-A", "cv", "-N2", "--gpus=4", "-t", "10", "-J", "x", "script.sh", "-N", "arg"])
    b = parse_args(
        ["--account=cv", "--nodes", "2", "--gpus", "4", "--time=10", "--job-name=x", "script.sh", "-N", "arg"]
    )
    assert a.values == b.values == {"account": "cv", "nodes": "2", "gpus": "4", "time": "10", "job_name": "x"}
    # everything after the script belongs to the script
    assert a.positionals == ["script.sh", "-N", "arg"]


def test_unknown_options_and_missing_values_are_problems() -> None:
    assert parse_args(["--frobnicate", "x.sh"]).problems == ["unrecognized option '--frobnicate'"]
    assert parse_args(["--account"]).problems == ["option '--account' requires an argument"]
    # sbatch options hsub does not read pass through as sbatch spells them
    passed = parse_args(["-w", "node1", "--comment=hi", "--reservation", "r1", "x.sh"]).passthrough
    assert passed == {
        "nodelist": ["--nodelist=node1"],
        "comment": ["--comment=hi"],
        "reservation": ["--reservation=r1"],
    }


def test_directives_stop_at_first_command() -> None:
    parsed = parse_directives(
        "#!/bin/bash\n#SBATCH -A cv --gpus=2  # two GPUs\n\n# comment\n#HSUB --model resnet50\n"
        "echo hi\n#SBATCH -A nlp\n"
    )
    assert parsed.values == {"account": "cv", "gpus": "2", "model": "resnet50"}


def test_directive_error_names_the_directives() -> None:
    assert parse_directives("#!/bin/sh\n#SBATCH --bogus=1\n").problems == [
        "#SBATCH lines: unrecognized option '--bogus=1'"
    ]


def test_precedence_command_line_over_env_over_directives(tmp_path: Path) -> None:
    path = script(tmp_path, "#!/bin/bash\n#SBATCH -A sys -q prior -J fromscript --gpus=1 -t 5\necho\n")
    sub = prep(["-A", "cv", path], env={"SBATCH_ACCOUNT": "nlp", "SBATCH_QOS": "urgent", "SBATCH_GPUS": "3"})
    assert sub.request.vc == "cv"  # command line
    assert sub.request.qos == "urgent"  # env over directive
    assert sub.request.gpus == 3  # env over directive
    assert sub.request.time_limit_s == 300  # directive only
    assert sub.job_name == "fromscript"


def test_gpu_ask_goes_to_slurm_and_model_hints_ride_in_the_comment(tmp_path: Path) -> None:
    path = script(tmp_path, "#!/bin/bash\necho\n")
    sub = prep(["-A", "cv", "-q", "prior", "--gpus", "2", "--model", "resnet50", "--batch-size", "64",
                "--iters", "100", "-o", "out-%j.txt", "--mem=4G", path])  # fmt: skip
    args = sub.sbatch_args
    # not held by hsub: Slurm's job_submit plugin holds it, and reads the GPU ask as sbatch passes it
    assert "--hold" not in args and "--gpus=2" in args and "--account=cv" in args and "--qos=prior" in args
    assert "--open-mode=append" in args and "--output=out-%j.txt" in args and "--mem=4G" in args
    comment = next(a for a in args if a.startswith("--comment="))[len("--comment=") :]
    assert read_hints(comment) == {"model": "resnet50", "batch_size": 64, "iters": 100}


def test_without_account_or_qos_slurm_applies_the_users_defaults(tmp_path: Path) -> None:
    path = script(tmp_path, "#!/bin/bash\necho\n")
    sub = prep(["--gres=gpu:2", "-N", "2", path], default_vc="nlp")
    assert sub.request.vc == "nlp" and sub.request.gpus == 4
    assert not [a for a in sub.sbatch_args if a.startswith(("--account", "--qos", "-A", "-q"))]
    assert "--nodes=2" in sub.sbatch_args and "--gres=gpu:2" in sub.sbatch_args


def test_a_gres_script_without_a_node_count_is_sent_without_one(tmp_path: Path) -> None:
    # `#SBATCH -n 32` and `--gres=gpu:1`: sbatch leaves the node count to Slurm, which spreads the
    # tasks over the nodes they need; hsub sent --nodes=1, and the job could never run
    path = script(tmp_path, "#!/bin/bash\n#SBATCH -n 32\n#SBATCH --gres=gpu:1\nsrun true\n")
    sub = prep([path], default_vc="nlp")
    assert "--gres=gpu:1" in sub.sbatch_args and sub.directives == ["--ntasks=32"]
    assert not [a for a in sub.sbatch_args + sub.directives if a.startswith(("--nodes", "-N"))]


def test_the_users_comment_follows_the_hints_in_one_comment(tmp_path: Path) -> None:
    path = script(tmp_path, "#!/bin/bash\necho\n")
    sub = prep(["-A", "cv", "--gpus", "1", "--model", "resnet50", "--batch-size", "8", "--iters", "10",
                "--comment", "my note", path])  # fmt: skip
    comments = [a for a in sub.sbatch_args if a.startswith("--comment")]
    assert len(comments) == 1 and comments[0].endswith(" my note")
    assert read_hints(comments[0].partition("=")[2]) == {"model": "resnet50", "batch_size": 8, "iters": 10}


def test_the_users_own_hold_reaches_slurm(tmp_path: Path) -> None:
    path = script(tmp_path, "#!/bin/bash\necho\n")
    assert "--hold" in prep(["-A", "cv", "--hold", "--gpus", "1", path]).sbatch_args


def test_each_option_reaches_sbatch_from_where_the_user_gave_it(tmp_path: Path) -> None:
    # sbatch judges some options by where they were given: seen on the lab, SBATCH_MEM_PER_NODE gives
    # way to a script's --mem-per-cpu, but hsub passed both on the command line and sbatch refused them
    path = script(tmp_path, "#!/bin/bash\n#SBATCH --mem-per-cpu=100\n#SBATCH --comment='a b'\necho\n")
    env = {
        "SBATCH_WCKEY": "w",
        "SBATCH_EXCLUSIVE": "user",
        "SBATCH_NO_REQUEUE": "1",
        "SBATCH_MEM_PER_NODE": "200",
    }
    sub = prep(["-A", "cv", "--hint=nomultithread", path], env=env)
    assert sub.directives == ["--mem-per-cpu=100"]
    assert {k: sub.env[k] for k in env if k in sub.env} == {
        "SBATCH_WCKEY": "w", "SBATCH_EXCLUSIVE": "user", "SBATCH_MEM_PER_NODE": "200"
    }  # fmt: skip
    # what hsub writes itself from every source is on its command line, the variable dropped
    assert "--no-requeue" in sub.sbatch_args and "--hint=nomultithread" in sub.sbatch_args
    assert not [a for a in sub.sbatch_args if a.startswith(("--wckey", "--exclusive", "--mem"))]
    assert next(a for a in sub.sbatch_args if a.startswith("--comment")).endswith("a b")


def test_gpu_env_never_reaches_sbatch() -> None:
    env = submit_env(
        {
            "SBATCH_GPUS": "2",
            "SBATCH_GRES": "gpu:1",
            "SBATCH_ACCOUNT": "cv",
            "HOME": "/h",
            "SBATCH_WCKEY": "w",
        }
    )
    assert env == {"HOME": "/h", "SBATCH_WCKEY": "w"}  # hsub writes the GPU ask and the account itself


@pytest.mark.parametrize(
    ("values", "gpus", "nodes", "gpn", "gtype"),
    [
        ({}, 1, None, None, None),
        ({"gpus": "4"}, 4, None, None, None),
        ({"gpus": "V100:4"}, 4, None, None, "V100"),
        ({"gpus_per_node": "4", "nodes": "2"}, 8, 2, 4, None),
        ({"gpus_per_node": "2"}, 2, None, 2, None),  # no -N: as sbatch, Slurm may spread the tasks
        ({"gpus": "8", "gpus_per_node": "4"}, 8, 2, 4, None),
        ({"gres": "gpu:V100:2", "nodes": "2"}, 4, 2, 2, "V100"),
        ({"gres": "gpu"}, 1, None, 1, None),
        ({"gpus": "2", "gpu_type": "V100"}, 2, None, None, "V100"),
    ],
)
def test_gpu_arithmetic(
    values: dict[str, str], gpus: int, nodes: int | None, gpn: int | None, gtype: str | None
) -> None:
    req = build_request({"account": "cv", **values})
    assert (req.gpus, req.nodes, req.gpus_per_node, req.gpu_type) == (gpus, nodes, gpn, gtype)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "-A VC"),
        ({"account": "cv", "qos": "vip"}, "unknown class 'vip'"),
        ({"account": "cv", "gpus": "0"}, "hsub is for GPU jobs"),
        ({"account": "cv", "gpus": "two"}, "whole number"),
        ({"account": "cv", "gpus": "7", "gpus_per_node": "2"}, "not a multiple"),
        ({"account": "cv", "nodes": "2"}, "how many GPUs"),
        ({"account": "cv", "gpus": "V100:2", "gpu_type": "A100"}, "conflicting GPU types"),
        ({"account": "cv", "model": "resnet50"}, "--batch-size and --iters"),
        ({"account": "cv", "like": "resnet50"}, "give --model"),
        ({"account": "cv", "gres": "mps:2"}, "only gpu"),
        ({"account": "cv", "time": "soon"}, "not a Slurm time"),
        ({"account": "bad vc"}, "may only contain"),
        ({"account": "cv", "gpu_mem": "lots"}, "not a size"),
    ],
)
def test_bad_requests_are_one_line(values: dict[str, str], message: str) -> None:
    with pytest.raises(HivebatchError, match=message) as info:
        build_request(values)
    assert "\n" not in str(info.value)


def test_gpu_mem_sizes() -> None:
    assert build_request({"account": "cv", "gpu_mem": "8G"}).gpu_mem_mib == 8192
    assert build_request({"account": "cv", "gpu_mem": "512M"}).gpu_mem_mib == 512


def test_wrap_and_script_sources(tmp_path: Path) -> None:
    sub = prep(["-A", "cv", "--wrap", "nvidia-smi; echo done"])
    assert sub.user_script.startswith("#!/bin/sh\n") and "nvidia-smi; echo done" in sub.user_script
    assert sub.job_name == "wrap"
    with pytest.raises(HivebatchError, match="cannot be used together"):
        prep(["-A", "cv", "--wrap", "true", "x.sh"])
    with pytest.raises(HivebatchError, match="does not exist"):
        prep(["-A", "cv", str(tmp_path / "missing.sh")])
    with pytest.raises(HivebatchError, match="first line must start with #!"):
        prep(["-A", "cv", script(tmp_path, "echo no shebang\n")])
    with pytest.raises(HivebatchError, match="give a batch script"):
        prep(["-A", "cv"])
    sub = prepare(
        ["-A", "cv"], environ={}, stdin_read=lambda: "#!/bin/sh\n#SBATCH --gpus=3\ntrue\n", check_config=False
    )
    assert sub.request.gpus == 3 and sub.job_name == "sbatch"


def test_opportunistic_jobs_stay_requeueable(tmp_path: Path) -> None:
    path = script(tmp_path, "#!/bin/sh\ntrue\n")
    with pytest.raises(HivebatchError, match="requeueable"):
        prep(["-A", "cv", "-q", "opportunistic", "--no-requeue", path])
    assert "--no-requeue" in prep(["-A", "cv", "--no-requeue", path]).sbatch_args


def test_env_options_parse() -> None:
    assert parse_env({"SBATCH_TIMELIMIT": "5", "SBATCH_PARTITION": "gpu"}).values == {"time": "5"}
    assert parse_env({"SBATCH_PARTITION": "gpu"}).passthrough == {"partition": ["--partition=gpu"]}


def test_a_script_named_without_a_directory_is_also_found_in_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sbatch's search_path: the working directory first, then PATH (recorded: sbatch_script_in_path.txt)
    tools, work = tmp_path / "tools", tmp_path / "work"
    tools.mkdir()
    work.mkdir()
    (tools / "train.sh").write_text("#!/bin/bash\n#SBATCH -J from-path\ntrue\n")
    (tools / "data").mkdir()
    monkeypatch.chdir(work)
    env = {"PATH": f"::{tools}:/usr/bin"}
    assert prep(["-A", "cv", "train.sh"], env=env).job_name == "from-path"
    (work / "train.sh").write_text("#!/bin/bash\n#SBATCH -J from-cwd\ntrue\n")
    assert prep(["-A", "cv", "train.sh"], env=env).job_name == "from-cwd"
    with pytest.raises(HivebatchError, match="does not exist"):
        prep(["-A", "cv", "./data"], env={"PATH": str(tools)})  # ./ is the working directory only
    with pytest.raises(HivebatchError, match="data"):
        prep(["-A", "cv", "data"], env={"PATH": str(tools)})  # a directory is passed over
    # a PATH entry stat() cannot reach is passed over too (seen on the lab: alice's PATH still named
    # /root/.cargo/bin, EACCES to her, and hsub ended in a PermissionError traceback)
    unreachable = "/" + "x" * 300  # ENAMETOOLONG: stat fails as it does for a directory not searchable
    assert prep(["-A", "cv", "train.sh"], env={"PATH": f"{unreachable}:{tools}"}).job_name == "from-cwd"
    (work / "train.sh").unlink()
    assert prep(["-A", "cv", "train.sh"], env={"PATH": f"{unreachable}:{tools}"}).job_name == "from-path"


def test_a_command_line_sbatch_cannot_read_is_told_before_the_script_is_read() -> None:
    # sbatch: "option '--wrap' requires an argument"; hsub read the script from standard input first
    # and said it did not look like a batch script
    def stdin() -> str:
        raise AssertionError("standard input read")

    with pytest.raises(HivebatchError, match="^option '--wrap' requires an argument$"):
        prepare(["--gres=gpu:1", "--wrap"], environ={}, stdin_read=stdin, check_config=False)


def _recorded_job_env() -> list[tuple[list[str], dict[str, str]]]:
    path = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "job_env_sbatch_vars.txt"
    cases = []
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            option, _, seen = line.partition("\t")
            cases.append(
                ([] if option == "(none)" else [option], dict(v.split("=", 1) for v in seen.split()))
            )
    return cases


@pytest.mark.parametrize(("options", "job_saw"), _recorded_job_env())
def test_the_job_gets_the_variables_hsub_keeps_from_sbatch(
    tmp_path: Path, options: list[str], job_saw: dict[str, str]
) -> None:
    # seen on the lab: the job got SBATCH_ACCOUNT and SBATCH_TIMELIMIT from sbatch but not from hsub, so
    # an sbatch inside the job read other defaults; the job script now exports what sbatch would pass on
    env = {"SBATCH_ACCOUNT": "cv", "SBATCH_TIMELIMIT": "5", "SBATCH_WCKEY": "w", "SBATCH_GPUS": "1"}
    sub = prep([*options, script(tmp_path, "#!/bin/bash\nenv\n")], env=env)
    assert sub.carried_env == {k: v for k, v in job_saw.items() if k not in sub.env}
    exports = [ln for ln in sub.job_script().splitlines() if ln.startswith("export SBATCH_")]
    assert exports == [f"export {k}={v}" for k, v in sorted(sub.carried_env.items())]


@pytest.mark.parametrize(
    ("gres", "mib", "kind"),
    [
        ("shard", 1024, None),
        ("shard:4", 4096, None),
        ("shard:v100:2", 2048, "v100"),
        ("shard:v100", 1024, "v100"),
    ],
)
def test_slurms_own_shard_ask_is_part_of_one_gpu(gres: str, mib: int, kind: str | None) -> None:
    # seen on the lab: `#SBATCH --gres=shard:4` ran under sbatch (gres/shard=4), hsub refused it
    sub = prep(["-A", "nlp", f"--gres={gres}", "--wrap", "true"])
    assert (sub.request.gpus, sub.request.gpu_mem_mib, sub.request.gpu_type) == (1, mib, kind)
    assert f"--gres=shard:{kind + ':' if kind else ''}{mib // 1024}" in sub.sbatch_args


@pytest.mark.parametrize("gres", ["shard:0", "shard:4,gpu:1", "shard:a:b:3"])
def test_a_shard_ask_hsub_cannot_read_is_one_clear_error(gres: str) -> None:
    with pytest.raises(HivebatchError, match=r"shard\[:TYPE\]\[:N\]"):
        prep(["-A", "nlp", f"--gres={gres}", "--wrap", "true"])
    with pytest.raises(HivebatchError, match="give one of them"):
        prep(["-A", "nlp", "--gres=shard:2", "--gpu-mem=2G", "--wrap", "true"])
