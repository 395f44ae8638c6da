"""The process between embtrt and tritonserver: it ties the server's life to its parent's and leaves
nothing behind it.

    python reaper.py PARENT_PID -- tritonserver ARGS...

Started in a session of its own (one process group: the reaper, tritonserver and its Python stubs).
- It dies with its parent (PR_SET_PDEATHSIG): when embtrt is killed, even with SIGKILL, the reaper
  is told, kills tritonserver at once (nobody is left to wait for a drain) and then the stubs.
- SIGTERM / SIGINT from a living parent go to tritonserver alone, which drains and unloads its
  models (the stubs must live until then).
- When tritonserver exits, for whatever reason (asked, crashed, killed), the stubs left in the group
  are killed and the shared-memory regions they used are removed from /dev/shm (a killed
  tritonserver leaves both: orphaned stubs live on for minutes holding their memory). The stubs'
  regions are noted while they run, since a dead stub's command line is gone.
- Orphaned (its parent killed), it also removes the parent's run folder (the drain marker's
  `embtrt-run-*` folder named by EMBTRT_DRAIN_FILE), which the parent would have removed.
- The reaper exits with tritonserver's exit code (128 + N for signal N), so its parent sees one
  process that stands for the server.
Standard library only; run by file path, so it needs no installed package.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
SHM_PREFIX = "triton_python_backend_shm_region"


def group_pids(pgid: int) -> set[int]:
    """Every live process of a process group."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.add(int(entry))
    return out


def _group_members() -> dict[int, list[str]]:
    """{pid: argv} of the other processes in this process group."""
    out = {}
    for pid in group_pids(os.getpgid(0)) - {os.getpid()}:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out[pid] = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
    return out


def _regions(members: dict[int, list[str]]) -> set[str]:
    return {a.lstrip("/") for argv in members.values() for a in argv if a.lstrip("/").startswith(SHM_PREFIX)}


def _clean(seen: set[str]) -> None:
    """Kill what is left of the group (the stubs), then remove their shared memory."""
    members = _group_members()
    seen |= _regions(members)
    for pid in members:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while members and time.monotonic() < deadline:
        time.sleep(0.05)
        members = _group_members()
    for name in seen:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join("/dev/shm", name))


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: reaper.py PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    parent = int(argv[0])
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no parent-death signal, the rest still holds
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        return 1
    child = subprocess.Popen(argv[2:])

    def on_signal(signum, _frame) -> None:
        if os.getppid() != parent:  # orphaned: nobody waits for a drain
            child.kill()
        else:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    seen: set[str] = set()
    while child.poll() is None:
        seen |= _regions(_group_members())
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=1.0)
    _clean(seen)
    flag = os.environ.get("EMBTRT_DRAIN_FILE")
    if flag and os.getppid() != parent and os.path.basename(os.path.dirname(flag)).startswith("embtrt-run-"):
        shutil.rmtree(os.path.dirname(flag), ignore_errors=True)
    code = child.returncode
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
