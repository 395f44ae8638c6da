"""`embtrt serve` as a user runs it, for the benchmarks that measure it from outside (drain.py,
preempt.py): free loopback ports, its own session (killed as a group), its output and tritonserver's
log in WORK, and a bounded wait until it says it is ready."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "builder"))
from embtrt.serve.server import free_port  # noqa: E402


def start_serve(repo: Path, work: Path, *args: str, timeout_s: float = 300) -> tuple[subprocess.Popen, str, Path]:
    """(the `embtrt serve REPO ARGS` process, its gRPC address, its output) once it is ready;
    SystemExit with its output's tail when it exits or is not ready within `timeout_s`."""
    g, h, m = free_port(), free_port(), free_port()
    log = work / f"serve-{g}.log"
    proc = subprocess.Popen([str(BIN / "embtrt"), "serve", str(repo), "--grpc-port", str(g), "--http-port", str(h),
                             "--metrics-port", str(m), "--health-port", "0", "--log-file",
                             str(work / f"tritonserver-{g}.log"), *args],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while "ready: model" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"serve did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    return proc, f"127.0.0.1:{g}", log
