"""Stopping a serving tritonserver without failing a client that sends meanwhile.

Left to itself, tritonserver 2.51 on SIGTERM stops its schedulers and unloads every model while its
gRPC endpoint still answers: requests sent meanwhile get NOT_FOUND ("Request for unknown model"),
which clients do not retry, then the connection is refused; and the BLS calls of front-door requests
still running are refused as well. `embtrt serve` stops it in three steps instead:

1. grace: served as usual for `grace_s` (balancers see /ready 503 and update their endpoints);
2. refuse: the marker file (EMBTRT_DRAIN_FILE, embtrt_backend.drain) makes the entry models answer
   every new request UNAVAILABLE, which clients retry on another replica, while the calls in flight
   finish: a model running one lists itself under `<marker>.busy/`, and every model instance that
   tracks its calls acknowledges the marker once it has (`<marker>.seen/`): the listing is read only
   when every living instance has, whatever the host's load. A request still queued (not started)
   when refusing begins is refused too: nothing was computed for it, and it is retried;
3. stop: once nothing is in flight (no model has listed a running call for `quiet_s`),
   tritonserver is killed at once: its models hold no state, and a closed port is
   UNAVAILABLE too. When `timeout_s` passes first, tritonserver's own shutdown finishes what is left.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from embtrt_backend.drain import ENV, busy_dir, instances_dir, seen_dir, stat_fields  # noqa: F401 (ENV: the variable the stubs read)


@dataclass
class Drained:
    """How a drain went: whether nothing was left in flight, and how long each step took."""
    idle: bool
    grace_s: float
    refusing_s: float
    busy_left: int


def marker(run_dir: Path) -> Path:
    return Path(run_dir) / "draining"


def busy(flag: Path) -> int:
    """How many front-door stubs are still running a call that began before the marker."""
    try:
        return len(os.listdir(busy_dir(str(flag))))
    except FileNotFoundError:
        return 0


def _alive(pid: int, start: str) -> bool:
    """The process that registered still runs: its pid is alive, not a zombie (a killed stub not yet reaped),
    and started when it said (not a later process given the same pid)."""
    fields = stat_fields(pid)   # [state, ..., start time at 19, ...]
    return bool(fields) and fields[0] not in ("Z", "X") and (not start or fields[19:20] == [start])


def unseen(flag: Path) -> list[str]:
    """The tracking model instances still alive that have not acknowledged the marker yet (they
    register at start as `<pid>-<n>`, holding their start time; those of a tritonserver killed and
    restarted are gone)."""
    d = instances_dir(str(flag))
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return []
    seen = set(os.listdir(seen_dir(str(flag)))) if os.path.isdir(seen_dir(str(flag))) else set()
    out = []
    for n in names:
        pid = n.split("-")[0]
        if n in seen or not pid.isdigit():   # acknowledged, or no registration of a model instance
            continue
        try:
            start = Path(d, n).read_text().strip()
        except OSError:
            continue
        if _alive(int(pid), start):
            out.append(n)
    return sorted(out)


def wait_seen(flag: Path, timeout_s: float, step_s: float = 0.02) -> bool:
    """Until every living tracking instance has acknowledged the marker (and so listed the call it
    runs); False when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while unseen(flag):
        if time.monotonic() >= deadline:
            return False
        time.sleep(step_s)
    return True


def wait_idle(flag: Path, timeout_s: float, quiet_s: float = 0.5, step_s: float = 0.02) -> bool:
    """Until no model has listed a running call for `quiet_s` (the gap between an ensemble's steps is
    shorter); False when `timeout_s` passes first. Triton's metrics cannot say it: they count queued
    requests, not running ones, and a refusal counts as a success."""
    deadline = time.monotonic() + timeout_s
    quiet_since: float | None = None   # when nothing running was first seen
    while time.monotonic() < deadline:
        now = time.monotonic()
        if busy(flag):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= quiet_s:
            return True
        time.sleep(step_s)
    return False


def drain(flag: Path, grace_s: float, timeout_s: float, quiet_s: float = 0.5, sleep=time.sleep) -> Drained:
    """Steps 1 and 2 of the module's doc: serve for `grace_s`, then refuse new requests and wait (at
    most `timeout_s`) until every tracking instance has listed what it runs and the calls in flight
    have finished. The caller then stops tritonserver. busy_left: listed calls and instances that
    never acknowledged (read as running one)."""
    t0 = time.monotonic()
    if grace_s > 0:
        sleep(grace_s)
    t1 = time.monotonic()
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()
    idle = wait_seen(flag, timeout_s) and wait_idle(flag, max(0.0, timeout_s - (time.monotonic() - t1)), quiet_s)
    return Drained(idle, t1 - t0, time.monotonic() - t1, busy(flag) + len(unseen(flag)))
