"""The Typer app, its two consoles, and the one handler that turns an EmbtrtError into its exit code.

Help texts are plain text (rich_markup_mode=None): they show `embtrt[tensorrt]` and
`HOST:PORT[/MODEL]` as written, and no type labels (`<bool>`) beside the flags."""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
from typing import Any, Callable, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from ..errors import EmbtrtError

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


JSON_ENV = "EMBTRT_JSON_LOGS"


def json_logs() -> bool:
    """--json-logs (or EMBTRT_JSON_LOGS=1): every line a command logs is one JSON object (TEI's --json-output)."""
    return os.environ.get(JSON_ENV, "") not in ("", "0")


def _json_line(stream, level: str, message: str, **more: str) -> None:
    doc = {"timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
           "level": level, "target": "embtrt", "message": message, **more}
    stream.write(json.dumps(doc) + "\n")
    stream.flush()


class JsonFormatter(logging.Formatter):
    """Python logging's records (the gateway's warnings) as the same JSON lines."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"timestamp": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
                           .isoformat(timespec="milliseconds"), "level": record.levelname,
                           "target": record.name, "message": record.getMessage()})


def fail(exc: EmbtrtError) -> NoReturn:
    """Print the error's message and hint on stderr and exit with its code (never 0)."""
    if json_logs():
        _json_line(sys.stderr, "ERROR", exc.message, **({"hint": exc.hint} if exc.hint else {}))
        raise typer.Exit(exc.exit_code or 1)
    err.print(f"[bold red]error:[/] {escape(exc.message)}")  # messages name extras like embtrt[tensorrt]
    if exc.hint:
        err.print(f"[yellow]hint:[/] {escape(exc.hint)}")
    raise typer.Exit(exc.exit_code or 1)


class Commands(TyperGroup):
    """The `embtrt` group: every command's EmbtrtError ends here, in one place."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except EmbtrtError as exc:
            fail(exc)


app = typer.Typer(
    name="embtrt",
    cls=Commands,
    help="Turn a Hugging Face embedding model into a NVIDIA Triton model repository, serve it, prove it.\n\n"
         "Extras by stage: pip install 'embtrt[build]' for build, demo, verify and bench (PyTorch, ONNX); "
         "'embtrt[tensorrt]' for engines on the GPU host; 'embtrt[server]' for a tritonserver to serve, "
         "matrix and tune with. The base install checks, embeds, probes and runs the gateway.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        out.print(f"embtrt {__version__}", markup=False)
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print embtrt's version and exit."),
          json_lines: bool = typer.Option(False, "--json-logs", help="Every line a command logs (progress, the ready line, warnings, errors) as one JSON object {timestamp, level, target, message}, for log collectors; also EMBTRT_JSON_LOGS=1. Default off.")) -> None:
    """Turn a Hugging Face embedding model into a NVIDIA Triton model repository, serve it, prove it."""
    if json_lines:
        os.environ[JSON_ENV] = "1"   # the servers and gateways this command starts log the same way
    if json_logs() and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        logging.basicConfig(level=logging.WARNING, handlers=[handler])


def say(message: str) -> None:
    """A line of a command's own output on stdout, printed as written (no markup); a JSON line under --json-logs."""
    if json_logs():
        _json_line(sys.stdout, "INFO", message)
        return
    out.print(message, markup=False)


def progress_log(as_json: bool) -> Callable[[str], None]:
    """Where progress lines go: stderr when stdout carries the --json document, else stdout."""
    if as_json and json_logs():
        return lambda m: _json_line(sys.stderr, "INFO", m)
    return (lambda m: err.print(m, markup=False)) if as_json else say


def main() -> None:
    app()
