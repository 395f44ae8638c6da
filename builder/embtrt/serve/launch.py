"""Starting a tritonserver until it is ready, with one more try where Triton itself, not the repository, ended
the start.

Seen on loaded hosts (CI's two cores, tests starting servers side by side): tritonserver aborting while its Python
backend's instances start, "terminate called after throwing an instance of 'boost::interprocess::lock_exception'"
(Signal 6; triton-inference-server/server#8882, open, also with one Python model and no BLS). Nothing in the
repository causes it and the same start succeeds when tried again, so such a start is tried once more, said in
the log. Any other failure (a model that does not load, a port taken, the start-up timeout) is reported at once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable, Protocol, TypeVar

from ..errors import ServerError


class TritonServer(Protocol):
    """What a start needs of serve.server.TritonServer (which imports this module)."""
    log_path: Path | None
    proc: subprocess.Popen | None

    def start(self) -> object: ...
    def wait_ready(self, timeout_s: float | None = None, should_stop=None) -> None: ...
    def stop(self, timeout_s: float | None = None, drain: bool = False, grace_s: float = 0.0,
             kill: bool | None = None) -> int | None: ...


S = TypeVar("S", bound=TritonServer)

TRANSIENT_ABORTS = ("boost::interprocess::lock_exception",)
TRIES = 2


def _said(server: TritonServer, since: int) -> str:
    """What the server's log holds from byte `since` on ("" where it cannot be read)."""
    try:
        with open(server.log_path, "rb") as f:  # type: ignore[arg-type]
            f.seek(since)
            return f.read().decode(errors="replace")
    except (OSError, TypeError):
        return ""


def _size(path: Path | None) -> int:
    try:
        return Path(path).stat().st_size if path is not None else 0
    except OSError:
        return 0


def transient_abort(server: TritonServer, since: int) -> str | None:
    """The known transient abort that ended this start (its log from byte `since`), or None: the server still
    runs, or ended otherwise."""
    if server.proc is None or server.proc.poll() is None:
        return None
    said = _said(server, since)
    return next((a for a in TRANSIENT_ABORTS if a in said), None)


def launch(server: S, should_stop: Callable[[], bool] | None = None,
           log: Callable[[str], None] | None = None) -> S:
    """server.start() and wait_ready(); a start ended by one of TRANSIENT_ABORTS is tried once more."""
    for attempt in range(1, TRIES + 1):
        since = _size(server.log_path)
        server.start()
        try:
            server.wait_ready(should_stop=should_stop)
            return server
        except ServerError:
            why = transient_abort(server, since)
            if attempt == TRIES or why is None or (should_stop is not None and should_stop()):
                raise
            (log or (lambda m: print(m, file=sys.stderr)))(
                f"tritonserver aborted while starting ({why}: Triton's Python backend, "
                f"triton-inference-server/server#8882, not the repository); starting it again ({attempt + 1} of {TRIES})")
            server.stop(kill=True)
    raise AssertionError("unreachable")
