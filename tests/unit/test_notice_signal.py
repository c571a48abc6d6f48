"""The notice a preempted job gets (config) and its signal (the job_submit plugin's admin comment)."""

from __future__ import annotations


def test_notice_settings_and_signals_from_the_admin_comment() -> None:
    import pytest

    from hivebatch.errors import ConfigError
    from hivebatch.notice import DEFAULT_SIGNAL, notice_seconds, parse_notice, signal_of

    rule = parse_notice({"preemption": {"notice_s": 90, "notice_s_by_class": {"normal": 300}}})
    assert (rule.for_class("opportunistic"), rule.for_class("normal")) == (90, 300)
    assert parse_notice({}).for_class("normal") == 120
    with pytest.raises(ConfigError, match="notice_s_by_class.huge: unknown class"):
        parse_notice({"preemption": {"notice_s_by_class": {"huge": 1}}})
    with pytest.raises(ConfigError, match="whole number of seconds"):
        parse_notice({"preemption": {"notice_s": -1}})
    b_usr1 = signal_of({"signal": "USR1", "signal_time_s": 30, "signal_batch": 1})
    assert (b_usr1.signal, b_usr1.target, b_usr1.time_s) == ("USR1", "batch", 30)
    assert notice_seconds(rule, "normal", b_usr1) == 30  # it asked for less than the class gives
    steps = signal_of({"signal": "SIGUSR2"})  # no @TIME: Slurm's default 60 s
    assert (steps.signal, steps.target, steps.time_s) == ("USR2", "steps", 60)
    assert signal_of({"signal": "10"}).signal == "USR1"
    assert signal_of({"signal": "NOPE"}) == DEFAULT_SIGNAL == signal_of({})
    assert (DEFAULT_SIGNAL.signal, DEFAULT_SIGNAL.target) == ("TERM", "all")
    assert notice_seconds(rule, "prior", DEFAULT_SIGNAL) == 90


def test_the_signal_of_admin_comments_recorded_on_the_lab() -> None:
    from pathlib import Path
    from types import SimpleNamespace

    from hivebatch.notice import signal_of
    from hivebatch.request import plugin_extras

    fixture = Path(__file__).parents[1] / "fixtures" / "slurm" / "admin_comment_signal.txt"
    comments = [
        ln.split("=", 1)[1] for ln in fixture.read_text().splitlines() if ln.startswith("AdminComment=")
    ]
    specs = [signal_of(plugin_extras(SimpleNamespace(admin_comment=c))) for c in comments]
    assert [(s.signal, s.target, s.time_s) for s in specs] == [
        ("USR1", "batch", 20),
        ("TERM", "steps", 45),
        ("TERM", "all", None),  # nothing recorded: the default
    ]
