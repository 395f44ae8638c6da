"""The Typer app, its two consoles, and the one handler that turns an EmbtrtError into its exit code.

Help texts are plain text (rich_markup_mode=None): they show `embtrt[tensorrt]` and
`HOST:PORT[/MODEL]` as written, and no type labels (`<bool>`) beside the flags."""

from __future__ import annotations

from typing import Any, Callable, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from ..errors import EmbtrtError

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def fail(exc: EmbtrtError) -> NoReturn:
    """Print the error's message and hint on stderr and exit with its code (never 0)."""
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


def say(message: str) -> None:
    """A line of a command's own output on stdout, printed as written (no markup)."""
    out.print(message, markup=False)


def progress_log(as_json: bool) -> Callable[[str], None]:
    """Where progress lines go: stderr when stdout carries the --json document, else stdout."""
    return (lambda m: err.print(m, markup=False)) if as_json else say


def main() -> None:
    app()
