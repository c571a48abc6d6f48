"""Every command of hivebatch, hsub, hq and hadmin has help text and is mentioned in README.md or docs/.

Commands are discovered, not listed by hand: the console scripts come from pyproject.toml, click
groups are walked (lazy subcommands included, so a command in a table whose module is missing fails
here), argparse-based scripts are asked for ``--help``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import sys
import tomllib
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]
# the user-facing commands (other console scripts, like the sbatch drop-in, speak for the tools they wrap)
COMMAND_SCRIPTS = ("hivebatch", "hsub", "hq", "hadmin")
# argparse scripts with subcommands of their own (click groups are discovered by walking them)
ARGPARSE_SUBCOMMANDS: dict[str, list[str]] = {"hq": ["vc"]}


def _scripts() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    scripts = dict(data["project"]["scripts"])
    missing = [name for name in COMMAND_SCRIPTS if name not in scripts]
    assert not missing, f"pyproject.toml lost the console scripts {missing}"
    return {name: scripts[name] for name in COMMAND_SCRIPTS}


def _click_root(target: str) -> click.Command | None:
    module_name, _attr = target.split(":")
    module = importlib.import_module(module_name)
    root = getattr(module, "cli", None)
    return root if isinstance(root, click.Command) else None


def _walk(prefix: str, command: click.Command) -> list[tuple[str, click.Command | None]]:
    out: list[tuple[str, click.Command | None]] = [(prefix, command)]
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=prefix.split()[-1])
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None:
                out.append((f"{prefix} {name}", None))
            else:
                out.extend(_walk(f"{prefix} {name}", sub))
    return out


def _commands() -> list[tuple[str, str, click.Command | None]]:
    """(command path, console-script target, click command or None for argparse scripts)."""
    found: list[tuple[str, str, click.Command | None]] = []
    for script, target in sorted(_scripts().items()):
        root = _click_root(target)
        if root is None:
            found.append((script, target, None))
            found.extend((f"{script} {sub}", target, None) for sub in ARGPARSE_SUBCOMMANDS.get(script, []))
        else:
            found.extend((path, target, cmd) for path, cmd in _walk(script, root))
    return found


COMMANDS = _commands()


def _argparse_help(target: str, args: list[str]) -> str:
    module_name, attr = target.split(":")
    main = getattr(importlib.import_module(module_name), attr)
    out, err = io.StringIO(), io.StringIO()
    stdin = sys.stdin
    sys.stdin = io.StringIO("")  # a command that reads a script from stdin must not wait for one
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            contextlib.suppress(SystemExit),
        ):
            main([*args, "--help"])
    finally:
        sys.stdin = stdin
    return out.getvalue() + err.getvalue()


@pytest.mark.parametrize(("path", "target", "command"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_command_has_help(path: str, target: str, command: click.Command | None) -> None:
    if command is None and ":" in target and _click_root(target) is not None:
        pytest.fail(f"`{path}` is listed in its group's command table but its module cannot be imported")
    if command is None:
        text = _argparse_help(target, path.split()[1:])
        assert "usage" in text.lower() and len(text.strip().splitlines()) > 2, (
            f"`{path} --help` prints no help"
        )
        return
    assert (command.help or "").strip(), f"`{path}` has no help text (give the click command a docstring)"


CLICK_COMMANDS = [c for c in COMMANDS if c[2] is not None]


@pytest.mark.parametrize(
    ("path", "command"), [(c[0], c[2]) for c in CLICK_COMMANDS], ids=[c[0] for c in CLICK_COMMANDS]
)
def test_options_have_help(path: str, command: click.Command) -> None:
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert (param.help or "").strip(), f"option {param.opts[0]} of `{path}` has no help text"


@pytest.mark.parametrize("path", [c[0] for c in COMMANDS])
def test_command_is_in_the_docs(path: str) -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert pages[0].exists(), "README.md is missing"
    text = "\n".join(p.read_text(encoding="utf-8") for p in pages)
    pattern = r"(?<![\w-])" + r"\s+".join(re.escape(word) for word in path.split()) + r"(?![\w-])"
    assert re.search(pattern, text), f"neither README.md nor docs/ mention `{path}`"
