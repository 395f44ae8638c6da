"""`embtrt check`: repository/check.py on one repository, or several served together."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .app import app, say


@app.command()
def check(repo: list[Path] = typer.Argument(..., exists=True, file_okay=False, help="A model repository written by embtrt build; several are also checked for serving together (model names, bundle Python)."),
          server_python: Optional[str] = typer.Option(None, help="Python version of the tritonserver that will serve it (e.g. 3.12): the bundle must be built for it. Default: not checked."),
          as_json: bool = typer.Option(False, "--json", help="Print the verdicts as JSON. Default off.")) -> None:
    """Check a repository: every config.pbtxt against Triton's model_config.proto, ensemble maps, files, token budget, bundle; exit 5 when any check fails."""
    from ..repository.bundle_record import parse_python
    from ..repository.check import CheckReport, check_repository, repositories_conflicts

    python = parse_python(server_python) if server_python else None
    rep = CheckReport()
    for r in repo:
        one = check_repository(r, allow_pending_plans=True, server_python=python)
        rep.items += [(ok, f"{r.name}: {m}" if len(repo) > 1 else m) for ok, m in one.items]
        rep.pending += one.pending
    if len(repo) > 1:
        rep.outcome(repositories_conflicts(repo),
                    f"{len(repo)} repositories can be served by one tritonserver (distinct model names, one server Python)")
    if as_json:
        sys.stdout.write(json.dumps({"passed": rep.passed, "items": rep.lines()}, indent=2) + "\n")
    else:
        for line in rep.lines():
            say(line)
    if not rep.passed:
        raise typer.Exit(5)
