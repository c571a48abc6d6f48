"""One config check: unknown sections, unknown and duplicate keys refused with their line by every
command that loads the config; `hivebatch config check` runs every section's own parser too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hivebatch.config import load_config
from hivebatch.errors import ConfigError

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT / "etc" / "hivebatch.example.yaml"


def variant(tmp_path: Path, old: str, new: str) -> Path:
    text = EXAMPLE.read_text()
    assert old in text
    path = tmp_path / "hivebatch.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if needle in line)


def test_the_example_config_loads() -> None:
    assert set(load_config(EXAMPLE)[1]) == {
        "cluster",
        "virtual_clusters",
        "database",
        "qos",
        "controller",
        "sharing",
    }


def test_unknown_section_refused_with_its_line(tmp_path: Path) -> None:
    path = variant(tmp_path, "sharing:", "sharng:")
    with pytest.raises(ConfigError, match=rf"line {line_of(path, 'sharng:')}: unknown section 'sharng'"):
        load_config(path)


def test_misspelt_key_refused_with_its_line(tmp_path: Path) -> None:
    path = variant(tmp_path, "  enabled: true", "  enabeld: true")
    with pytest.raises(
        ConfigError, match=rf"line {line_of(path, 'enabeld')}: sharing: unknown key 'enabeld'"
    ):
        load_config(path)


def test_duplicate_key_refused_with_both_lines(tmp_path: Path) -> None:
    path = variant(tmp_path, "  theta: 0.5", "  theta: 0.5\n  theta: 0.9")
    first = line_of(path, "theta: 0.5")
    with pytest.raises(
        ConfigError, match=rf"line {first + 1}: duplicate key 'theta' \(first given at line {first}\)"
    ):
        load_config(path)


def test_a_syntax_error_names_the_character_that_broke_it(tmp_path: Path) -> None:
    # libyaml, which reads the config where PyYAML has it, says only "found character that cannot
    # start any token"; the pure-Python parser names the tab an editor put in
    path = variant(tmp_path, "  theta: 0.5", "\ttheta: 0.5")
    line = line_of(path, "theta: 0.5")
    with pytest.raises(
        ConfigError,
        match=rf"invalid YAML at line {line}, column 1: found character '\\t' that cannot start any token",
    ):
        load_config(path)


def hivebatch(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from hivebatch.cli.hivebatch.main import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_config_check_reports_every_section_at_once(tmp_path: Path) -> None:
    path = variant(tmp_path, "theta: 0.5", "theta: high")
    path.write_text(path.read_text().replace("interval_s: 60", "interval_s: -1"))
    proc = hivebatch("config", "check", "--config", str(path))
    assert proc.returncode == 1
    assert "qos.theta" in proc.stderr and "controller.interval_s" in proc.stderr
    assert proc.stderr.count("\n") == 2  # the note about the ledger not created yet, then one error line


def test_config_check_reads_every_section_the_config_may_hold(tmp_path: Path) -> None:
    from hivebatch.config import SCHEMA
    from hivebatch.configcheck import CHECKS

    # limits: had no check: limits.time_limit_s over a year passed, and the controller refused to start
    checked = {name for section in CHECKS for name in section.split(" and ")}
    assert set(SCHEMA) <= checked, set(SCHEMA) - checked
    path = tmp_path / "hivebatch.yaml"
    path.write_text(EXAMPLE.read_text() + "limits: {time_limit_s: 99999999}\n")
    proc = hivebatch("config", "check", "--config", str(path))
    assert proc.returncode == 1 and "limits.time_limit_s may be at most 31536000 (a year)" in proc.stderr


def test_config_check_passes_the_example() -> None:
    proc = hivebatch("config", "check", "--config", str(EXAMPLE))
    assert proc.returncode == 0 and proc.stdout.strip().endswith(": ok")


def test_a_report_without_its_ledger_is_an_error_not_an_empty_report(tmp_path: Path) -> None:
    path = variant(tmp_path, "sqlite:///var/hivebatch.db", "sqlite:///var/typo.db")
    code = "from hivebatch.cli.hadmin.main import main; main()"
    proc = subprocess.run([sys.executable, "-c", code, "report", "quota", "--config", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 1 and "no hivebatch ledger at" in proc.stderr and "typo.db" in proc.stderr


def test_a_loaded_config_can_be_written_back() -> None:
    import yaml

    data = load_config(EXAMPLE)[1]
    assert yaml.safe_load(yaml.safe_dump(data)) == data


def test_the_limits_section_the_example_documents_is_a_known_section(tmp_path: Path) -> None:
    path = variant(tmp_path, "# limits:", "limits: {gpus: 64}\n# limits:")
    assert load_config(path)[1]["limits"] == {"gpus": 64}


@pytest.mark.parametrize("word", [".nan", ".inf"])
def test_a_controller_time_yaml_reads_as_nan_or_inf_is_refused(word: str) -> None:
    import yaml

    from hivebatch.config import ConfigError, controller_seconds

    section = yaml.safe_load(f"{{interval_s: {word}, start_timeout_s: 120}}")
    with pytest.raises(
        ConfigError, match=r"^controller.interval_s must be more than 0 seconds \(a finite number\)"
    ):
        controller_seconds(section, "interval_s", 60.0)
    assert controller_seconds(section, "start_timeout_s", 300.0) == 120.0
