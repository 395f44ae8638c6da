"""The commands the README and docs/ show exist, with the flags they show: a renamed command or flag
fails here instead of a reader. Every `embtrt CMD ... --flag` in a code span or block is checked
against the CLI's own parser (click, under Typer)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from embtrt.cli import app

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
CLI = typer.main.get_command(app)


def _commands(text: str) -> list[str]:
    """`embtrt ...` invocations in inline code and in fenced blocks (one per line, continuations joined)."""
    found = [m.group(1) for m in re.finditer(r"`(embtrt [^`]+)`", text)]
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            at = line.find("embtrt ")
            if at >= 0 and (at == 0 or line[at - 1] in " /$"):
                found.append(line[at:])
    return found


def _flags_of(cmd) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}


def _check(invocation: str) -> str | None:
    try:
        words = shlex.split(invocation)
    except ValueError:
        words = invocation.split()
    if len(words) < 2 or words[1].startswith("-"):
        return None
    name = words[1]
    if name not in CLI.commands:  # type: ignore[attr-defined]
        return f"`{invocation}`: no command {name!r}"
    flags = _flags_of(CLI.commands[name])  # type: ignore[attr-defined]
    for w in words[2:]:
        if w.startswith("--"):
            flag = w.split("=", 1)[0].rstrip(",.;:)")
            if flag not in flags and not re.fullmatch(r"--[A-Z_]+|--\.\.\.", flag):
                return f"`{invocation}`: {name} has no {flag}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_shown_exists_with_the_flags_shown(page):
    shown = _commands(page.read_text())
    problems = [p for p in map(_check, shown) if p]
    assert not problems, "\n".join(problems)


def test_the_check_finds_a_renamed_flag_and_an_unknown_command():
    assert _check("embtrt serve repo --probe-intervall 5") == "`embtrt serve repo --probe-intervall 5`: serve has no --probe-intervall"
    assert _check("embtrt nope repo") == "`embtrt nope repo`: no command 'nope'"
    assert _check("embtrt gateway repo --triton 127.0.0.1:8001 --token-ids") is None
    assert "embtrt gateway repo --token-ids" in _commands("text `embtrt gateway repo --token-ids` text")
