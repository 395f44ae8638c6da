"""A repository's start-up: tritonserver on loopback ports, timed from the start to every model
ready (as `embtrt serve` waits), with the CPU seconds each process of the server's tree used.

    python benchmarks/startup.py REPO [--starts 3] [--per-process] [--auto-complete]

docs/serving.md records the default repository's figures; the CPU column shows which models'
load (imports, sessions, warm-ups) the start spends its time on. --auto-complete interleaves starts
with Triton's config auto-complete left on (as before embtrt passed --disable-auto-complete-config):
the Python backend then starts one more stub per model only to ask it for a config.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from embtrt.serve.server import ServerSpec, TritonServer, free_port

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK   # utime + stime


def label(pid: int) -> str:
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    if argv and argv[0].endswith("triton_python_backend_stub") and len(argv) > 1:
        return "stub " + Path(argv[1]).parent.parent.name   # .../NAME/1/model.py
    return Path(argv[0]).name if argv else str(pid)


def one_start(repo: Path, log: Path, auto_complete: bool = False) -> tuple[float, dict[int, tuple[str, float]]]:
    spec = ServerSpec(repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                      log_file=log, graceful_exit=False, auto_complete=auto_complete)
    t0 = time.perf_counter()
    with TritonServer(spec) as srv:
        ready = time.perf_counter() - t0
        usage = {}
        for pid in srv.pids():
            try:
                usage[pid] = (label(pid), cpu_seconds(pid))
            except OSError:
                continue
    return ready, usage


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--per-process", action="store_true", help="print each process's CPU seconds")
    ap.add_argument("--auto-complete", action="store_true",
                    help="also start with Triton's config auto-complete on, interleaved, for the comparison")
    a = ap.parse_args()
    cpu = os.popen("lscpu | sed -n 's/^Model name: *//p'").read().strip() or "unknown CPU"
    print(f"{a.repo}: {a.starts} starts, {os.cpu_count()} cores ({cpu})")
    for i in range(a.starts):
        for auto in (False, True) if a.auto_complete else (False,):
            ready, usage = one_start(a.repo, Path(f"/tmp/embtrt-startup-{os.getpid()}-{i}.log"), auto)
            total = sum(c for _, c in usage.values())
            stubs = sum(1 for n, _ in usage.values() if n.startswith("stub "))
            how = " (auto-complete on)" if auto else ""
            print(f"start {i + 1}{how}: ready in {ready:.2f} s, {total:.2f} CPU-s in {len(usage)} processes ({stubs} stubs)")
        if a.per_process:
            for name, c in sorted(usage.values(), key=lambda x: -x[1]):
                print(f"    {c:6.2f}  {name}")


if __name__ == "__main__":
    main()
