"""`--help` of every command and sub-command says what the source says.

Walks the command tree, so a verb added later is covered too.
"""

from __future__ import annotations

import importlib.metadata
import re

import pytest
import typer.main
from typer.testing import CliRunner

from gridroute.cli import app

BRACKETED = re.compile(r"\[[^\]]+\]")


def _commands() -> list[tuple[list[str], object]]:
    found: list[tuple[list[str], object]] = []

    def walk(path: list[str], cmd: object) -> None:
        found.append((path, cmd))
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk([*path, name], sub)

    walk([], typer.main.get_command(app))
    return found


COMMANDS = _commands()


def _squeeze(text: str) -> str:
    """Help is wrapped (sometimes inside a word, at a hyphen): compare without spaces."""
    return re.sub(r"\s+", "", text)


def test_the_tree_has_every_verb() -> None:
    paths = {" ".join(p) for p, _ in COMMANDS}
    assert {"gateway", "operator", "demo", "sim run", "config check", "certs init"} <= paths


@pytest.mark.parametrize(
    ("path", "cmd"), COMMANDS, ids=[" ".join(p) or "gridroute" for p, _ in COMMANDS]
)
def test_help_keeps_bracketed_text_and_shows_flags_as_flags(path: list[str], cmd: object) -> None:
    res = CliRunner().invoke(app, [*path, "--help"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "<bool>" not in out
    shown = _squeeze(out)
    for param in getattr(cmd, "params", []):
        help_text = getattr(param, "help", None) or ""
        for bracketed in BRACKETED.findall(help_text):
            assert _squeeze(bracketed) in shown, f"{' '.join(path)}: {bracketed!r} lost:\n{out}"
        if getattr(param, "is_flag", False):
            for opt in param.opts:
                assert re.search(rf"{re.escape(opt)}(\s|,|/|$)", out), out


def test_demo_help_shows_its_defaults() -> None:
    """The reported case: `--clients  Clients under capacity .`"""
    out = CliRunner().invoke(app, ["demo", "--help"]).output
    assert "Clients under capacity [default: 60% of all slots]" in " ".join(out.split())
    assert re.search(r"--serve\s+Then leave the grid up", out)


def test_version() -> None:
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.output == f"gridroute {importlib.metadata.version('gridroute')}\n"
