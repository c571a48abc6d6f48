"""hsub reads job scripts, command lines and SBATCH_* variables as the real sbatch 22.05 does.

tests/fixtures/sbatch/jobscripts.json holds what sbatch itself answered on the Slurm lab
(tests/fixtures/sbatch/record.py; the integration test asks the live sbatch again): whether it accepted
the job and which options it read. hsub must accept the same jobs, read the same options with the same
values, and refuse the same ones with sbatch's reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hivebatch.errors import HivebatchError
from hivebatch.submit.build import build_request, read_sources
from hivebatch.submit.checks import interpret_shape
from hivebatch.submit.options import BY_LONG, Parsed, parse_args
from hivebatch.submit.script import decode_script, read_directives

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCRIPTS = FIXTURES / "jobscripts"
RECORDED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "sbatch" / "jobscripts.json").read_text())
PLAIN = "03_indented_ignored.sh"
# options sbatch prints as typed (others it prints normalised: absolute paths, HH:MM:SS, "set", …)
VERBATIM = frozenset(
    [
        "account",
        "job-name",
        "partition",
        "gpus",
        "gpus-per-node",
        "nodes",
        "ntasks",
        "ntasks-per-node",
        "cpus-per-task",
        "mem",
        "mem-per-cpu",
        "mem-per-gpu",
        "cpus-per-gpu",
        "gpus-per-task",
        "ntasks-per-gpu",
        "array",
        "comment",
        "mail-type",
        "mail-user",
        "wckey",
        "hint",
        "gres-flags",
        "gpu-bind",
        "export",
        "signal",
        "nice",
        "distribution",
        "propagate",
        "kill-on-invalid-dep",
        "threads-per-core",
        "cluster",
        "clusters",
        "mem-bind",
    ]
)


def hsub_reads(name: str) -> tuple[Parsed, bool]:
    """hsub's reading of one recorded case: (merged options, accepted)."""
    case = RECORDED[name]
    script = case_script(name)
    cmd = parse_args([*case.get("args", []), str(script)])
    has_script = bool(cmd.positionals)
    merged = read_sources(cmd, decode_script(script.read_bytes()), case.get("env", {})).merged
    values, problems = interpret_shape(merged.values)
    accepted = not merged.problems and not problems and has_script
    if accepted:
        try:
            build_request(values, default_vc="cv")  # recorded as alice, whose default account is cv
        except HivebatchError:
            accepted = False
    return merged, accepted


def case_script(name: str) -> Path:
    """A recorded script, or a command line's or variables' own script (the plain one by default)."""
    return SCRIPTS / (name if name.endswith(".sh") else RECORDED[name].get("script", PLAIN))


def sbatch_names(parsed: Parsed) -> dict[str, str | bool]:
    # False: reset (a flag's variable set to 0, or the other option of the same field given later)
    return {name: value for name, value in parsed.seen.items() if BY_LONG[name].sbatch and value is not False}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_same_acceptance_as_sbatch(name: str) -> None:
    _, accepted = hsub_reads(name)
    assert accepted == (RECORDED[name]["returncode"] == 0)


@pytest.mark.parametrize("name", sorted(n for n, c in RECORDED.items() if c["returncode"] == 0))
def test_same_options_and_values_as_sbatch(name: str) -> None:
    parsed, _ = hsub_reads(name)
    ours = sbatch_names(parsed)
    theirs = RECORDED[name]["options"]
    assert set(ours) - {"verbose"} == set(theirs)
    for option in set(theirs) & VERBATIM:
        assert same_value(option, ours[option], theirs[option]), option


def same_value(option: str, ours: str | bool, theirs: str) -> bool:
    """The same bytes (the recording reads sbatch's output as Latin-1, hsub keeps a script's bytes that
    are not UTF-8 as surrogates); sbatch prints a memory size's unit in capitals (Torque's ``16gb``)."""
    if option in ("mem", "mem-per-cpu", "mem-per-gpu"):
        ours = str(ours).upper()
    if option == "mail-type":  # sbatch prints the types it ORed together, each once
        return isinstance(ours, str) and set(ours.upper().split(",")) == set(theirs.split(","))
    return isinstance(ours, str) and ours.encode("utf-8", "surrogateescape") == theirs.encode("latin-1")


@pytest.mark.parametrize("name", sorted(n for n, c in RECORDED.items() if c["returncode"] != 0))
def test_refused_with_sbatchs_reason(name: str) -> None:
    parsed, _ = hsub_reads(name)
    reason = RECORDED[name]["errors"][0].removeprefix("sbatch: ").removeprefix("error: ")
    if "is not a valid node count" in reason:  # the script path was taken as -N's value, as sbatch does
        assert parsed.values["nodes"].endswith(PLAIN)
    else:
        assert any(p.endswith(reason) for p in parsed.problems), parsed.problems


def test_every_problem_is_reported_at_once() -> None:
    parsed = parse_args(["--gpu=2", "--bogus", "--hold=1", "-z", "job.sh"])
    assert len(parsed.problems) == 4
    with pytest.raises(HivebatchError, match="4 problems"):
        parsed.raise_problems()


def test_a_value_may_be_the_next_directive_line() -> None:
    parsed = read_directives("#!/bin/sh\n#SBATCH -J\n#SBATCH next-line\n")
    assert parsed.values["job_name"] == "next-line"


def test_indented_and_late_directives_are_comments() -> None:
    text = "#!/bin/sh\n  #SBATCH --gpus=8\n#SBATCH --gpus=1\nhostname\n#SBATCH --gpus=4\n"
    assert read_directives(text).values == {"gpus": "1"}


def test_unmatched_quote_is_one_clear_problem() -> None:
    parsed = read_directives('#!/bin/sh\n#SBATCH -J "open\n')
    assert parsed.problems[0] == "script line 2: #SBATCH line cannot be read: unmatched \" in ' -J \"open'"


def test_hsub_abbreviations_never_shadow_sbatchs() -> None:
    assert parse_args(["--li=x"]).tokens == ["--licenses=x"]  # sbatch's, although hsub has --like
    assert parse_args(["--lik=resnet"]).values == {"like": "resnet"}


def test_a_node_range_is_read_as_the_plugin_reads_it() -> None:
    # the plugin runs -N 2-3 on 2 nodes (tests/fixtures/slurm/node_range.txt) and leaves -N 1-3 open
    assert interpret_shape({"nodes": "2-3", "gpus_per_node": "1"})[0]["nodes"] == "2"
    assert interpret_shape({"nodes": "2-2"})[0]["nodes"] == "2"
    assert "nodes" not in interpret_shape({"nodes": "1-3"})[0]
