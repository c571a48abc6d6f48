"""Per-user limits on the strict classes: the config section, and the decisions made from usage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_config_check import hivebatch

from hivebatch.config import read_yaml
from hivebatch.errors import ConfigError
from hivebatch.userlimits import (
    ClassLimit,
    StrictRun,
    StrictUse,
    UserLimits,
    class_within,
    over_limit,
    parse_user_limits,
    site_limits,
    strict_usage,
)

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT / "etc" / "hivebatch.example.yaml"
VCS = ("cv", "nlp", "sys")
DOCUMENTED = """\
# user_limits:                # per user and VC, on the classes that outrank colleagues (docs/enforcement.md)
#   urgent: {gpu_hours_per_week: 48, running_jobs: 2}   # GPU-hours over the last 7 days; jobs holding GPUs
#   prior: {gpu_hours_per_week: 200}
#   vcs:
#     nlp: {urgent: {gpu_hours_per_week: 96}}           # a VC's own figures replace those above, key by key
"""


def config_with(tmp_path: Path, section: str) -> Path:
    path = tmp_path / "hivebatch.yaml"
    path.write_text(EXAMPLE.read_text() + "\n" + section)
    return path


def limits_of(section: str, tmp_path: Path) -> UserLimits:
    return parse_user_limits(read_yaml(config_with(tmp_path, section)), VCS)


def test_the_example_documents_a_valid_section(tmp_path: Path) -> None:
    assert DOCUMENTED in EXAMPLE.read_text()
    uncommented = "\n".join(line[2:] for line in DOCUMENTED.splitlines()) + "\n"
    limits = limits_of(uncommented, tmp_path)
    assert limits.limit("cv", "urgent") == ClassLimit(48.0, 2)
    # a VC's figure replaces the default key by key: nlp keeps the running-jobs limit
    assert limits.limit("nlp", "urgent") == ClassLimit(96.0, 2)
    assert limits.limit("cv", "prior") == ClassLimit(200.0, None)
    assert limits.limit("cv", "normal") is None


def test_no_section_limits_nothing() -> None:
    limits = parse_user_limits({}, VCS)
    assert limits.empty and limits.limit("cv", "urgent") is None


def test_a_vc_may_lift_a_limit_with_null(tmp_path: Path) -> None:
    limits = limits_of(
        "user_limits:\n  urgent: {running_jobs: 1}\n  vcs:\n    sys: {urgent: {running_jobs: null}}\n",
        tmp_path,
    )
    assert limits.limit("sys", "urgent") is None
    assert limits.limit("cv", "urgent") == ClassLimit(None, 1)


BAD = [
    ("user_limits:\n  normal: {running_jobs: 2}\n", "normal", "'normal' cannot be limited"),
    ("user_limits:\n  urgent: {gpu_hours: 2}\n", "gpu_hours", "unknown key 'gpu_hours'"),
    (
        "user_limits:\n  urgent: {running_jobs: 1.5}\n",
        "running_jobs",
        "running_jobs: must be a whole number >= 0",
    ),
    (
        "user_limits:\n  urgent:\n    gpu_hours_per_week: -1\n",
        "gpu_hours_per_week",
        "must be a number of GPU-hours >= 0",
    ),
    ("user_limits:\n  urgent: {gpu_hours_per_week: true}\n", "gpu_hours", "got True"),
    ("user_limits:\n  urgent: 48\n", "urgent", "user_limits.urgent: must be a mapping"),
    (
        "user_limits:\n  vcs:\n    vision: {urgent: {running_jobs: 1}}\n",
        "vision",
        "'vision' is not a virtual cluster",
    ),
    ("user_limits: [urgent]\n", "user_limits", "user_limits: must be a mapping"),
]


@pytest.mark.parametrize(("section", "needle", "why"), BAD, ids=[b[2] for b in BAD])
def test_config_check_names_the_line_of_a_bad_limit(
    tmp_path: Path, section: str, needle: str, why: str
) -> None:
    path = config_with(tmp_path, section)
    line = max(i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text)
    with pytest.raises(ConfigError, match=f"^line {line}: .*{why}"):
        parse_user_limits(read_yaml(path), VCS)


def test_config_check_reports_a_bad_limit_with_its_line(tmp_path: Path) -> None:
    path = config_with(tmp_path, "user_limits:\n  urgent: {running_jobs: -2}\n")
    line = len(path.read_text().splitlines())
    out = hivebatch("config", "check", "--config", str(path))
    assert out.returncode == 1
    assert f"line {line}: user_limits.urgent.running_jobs: must be a whole number >= 0, got -2" in out.stderr


LIMIT = ClassLimit(gpu_hours_per_week=48, running_jobs=2)


@pytest.mark.parametrize(
    ("use", "over"),
    [
        (StrictUse(47.5, 1), None),
        (StrictUse(48.0, 0), "alice used 48 of 48 GPU-hours in the last 7 days"),
        (StrictUse(52.25, 0), "alice used 52.2 of 48 GPU-hours in the last 7 days"),
        (StrictUse(0.0, 2), "alice has 2 of 2 urgent jobs holding GPUs"),
    ],
    ids=["under", "at the GPU-hours", "over the GPU-hours", "at the running jobs"],
)
def test_over_limit_at_and_past_the_figure(use: StrictUse, over: str | None) -> None:
    assert over_limit(LIMIT, use, "alice", "urgent") == over


def test_a_job_over_its_class_limit_runs_as_the_next_class_within() -> None:
    limits = UserLimits(classes={"urgent": LIMIT, "prior": ClassLimit(running_jobs=1)})
    usage = {("alice", "cv", "urgent"): StrictUse(50, 0), ("alice", "cv", "prior"): StrictUse(0, 1)}
    cls, why = class_within(limits, usage, "alice", "cv", "urgent")
    assert cls == "normal" and why == "urgent limit in cv: alice used 50 of 48 GPU-hours in the last 7 days"
    assert class_within(limits, usage, "alice", "nlp", "urgent") == ("urgent", None)  # per VC
    assert class_within(limits, usage, "bob", "cv", "urgent") == ("urgent", None)  # per user
    assert class_within(limits, usage, "alice", "cv", "normal") == ("normal", None)


def test_usage_counts_the_last_seven_days_and_the_jobs_holding_gpus() -> None:
    now = datetime(2026, 11, 24, 12, tzinfo=UTC)
    runs = [
        StrictRun(
            "alice", "cv", "urgent", 4, now - timedelta(days=8), now - timedelta(days=7, hours=-2)
        ),  # 2 h in
        StrictRun("alice", "cv", "urgent", 2, now - timedelta(hours=3), None),  # running: up to now
        StrictRun("alice", "cv", "normal", 8, now - timedelta(hours=3), None),  # not a strict class
        StrictRun("bob", "nlp", "prior", 1, now - timedelta(days=9), now - timedelta(days=8)),  # outside
    ]
    usage = strict_usage(runs, [("alice", "cv", "urgent"), ("alice", "cv", "normal")], now)
    assert usage == {("alice", "cv", "urgent"): StrictUse(4 * 2 + 2 * 3, 1)}


def test_site_limits_resolve_every_vc() -> None:
    limits = UserLimits(classes={"urgent": LIMIT}, vcs={"nlp": {"urgent": {"gpu_hours_per_week": 96}}})
    assert site_limits(limits, VCS) == {
        "cv": {"urgent": {"gpu_hours_per_week": 48.0, "running_jobs": 2}},
        "nlp": {"urgent": {"gpu_hours_per_week": 96.0, "running_jobs": 2}},
        "sys": {"urgent": {"gpu_hours_per_week": 48.0, "running_jobs": 2}},
    }
