"""hq reads squeue's options as squeue does and fills hivebatch's columns into squeue's own output.

tests/fixtures/squeue/marked.json holds what the real squeue printed on the lab for the marked formats
(three jobs of alice: a held array 156_[1-3], held 154, running 155); the lab test compares hq with
squeue byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hivebatch.cli.hq.squeue import HB_FIELDS, fill_markers, hb_fields_in, marked_format, read_args

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "squeue" / "marked.json").read_text()
)
VALUES = {
    156: {"vc": "cv", "slack": "+5m"},
    154: {"vc": "nlp", "slack": "-"},
    155: {"vc": "cv", "placement": "node1:[0]"},
}


def value(field: str, job_id: int) -> str:
    return VALUES[job_id].get(field, "")


@pytest.mark.parametrize("flag", ["o", "O"])
def test_marked_format_is_what_was_recorded(flag: str) -> None:
    case = RECORDED[flag]
    assert marked_format(flag, case["format"])[0] == case["marked"]


def filled(flag: str) -> list[str]:
    case = RECORDED[flag]
    _, cols = marked_format(flag, case["format"])
    return fill_markers(case["squeue_stdout"], cols, value).splitlines()


def test_percent_format_filled_in_squeue_output() -> None:
    lines = filled("o")
    assert lines[0] == "             JOBID     USER VC      SLACK WHY|"
    assert lines[1] == "         156_[1-3]    alice cv        +5m |"
    assert lines[2] == "               154    alice nlp          - |"


def test_long_format_keeps_squeue_columns_and_widths() -> None:
    lines = filled("O")
    assert lines[0] == "JOBID     VC    USER                   PLACEMENT|PARTITION           "
    assert lines[3] == "155       cv    alice                  node1:[0]|gpu                 "


def test_squeue_options_read_as_squeue_reads_them() -> None:
    args = read_args(["-p", "gpu", "--Form=JobID,VC", "-u", "alice", "-j", "2_39", "--json", "--star"])
    assert args.problems == []
    assert args.format == ("O", "JobID,VC")
    assert args.own == {"json": True}
    assert args.squeue == ["-p", "gpu", "--Form=JobID,VC", "-u", "alice", "-j", "2_39", "--star"]
    assert args.words == ["2_39"]
    assert read_args(["--s"]).problems == [
        "option '--s' is ambiguous; possibilities: '--sib' '--sibling' '--sort' '--start' '--steps' '--states'"
    ]


def test_only_hivebatch_fields_need_hq() -> None:
    assert not hb_fields_in("o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R")
    assert hb_fields_in("o", "%i %.8{slack}") and hb_fields_in("O", "JobID,placement:20")
    assert set(HB_FIELDS) >= {"vc", "class", "placement", "predictedstart", "predictedend", "slack", "why"}


def test_a_first_column_that_fills_its_width_keeps_its_text() -> None:
    # squeue prints `%.10i` of a pending array as exactly "1202_[1-3]": no leading blank before the marker
    text, cols = marked_format("o", "%.10i|%{vc}|%.8u")
    line = "1202_[1-3]|\x011202\x020\x03|   alice"
    assert fill_markers(line, cols, lambda field, job: f"{field}{job}") == "1202_[1-3]|vc1202|   alice"
