"""Who holds a port: refuse ports already taken, and check that the server answering on a port is
our own child, not an orphan of an earlier run or another program (Linux /proc)."""

from __future__ import annotations

import collections
import errno
import os
import socket
import threading
import time

from ..errors import ServerError
from .reaper import group_pids as group_pids  # re-exported: server.stop and the tests read it here


_HANDED: collections.deque[int] = collections.deque(maxlen=512)   # ports free_port gave out lately, newest last
_LOCK = threading.Lock()


PORT_RANGE_ENV = "EMBTRT_PORT_RANGE"


def _port_range() -> tuple[int, int] | None:
    """$EMBTRT_PORT_RANGE as (low, high), e.g. 20000-24999; None when unset."""
    value = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not value:
        return None
    try:
        low, high = (int(x) for x in value.split("-"))
    except ValueError:
        raise ServerError(f"{PORT_RANGE_ENV}={value!r} is not a port range", "write it as LOW-HIGH, e.g. 20000-24999") from None
    if not 1024 <= low <= high <= 65535:
        raise ServerError(f"{PORT_RANGE_ENV}={value!r} is not a range of ports 1024-65535", "write it as LOW-HIGH")
    return low, high


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, never one this process was given in its last 512 calls: the
    kernel may hand the same free port to two binds in a row, and a server given it for two of its
    endpoints (seen: HTTP and metrics on 127.0.0.1:46865) refuses to start. With $EMBTRT_PORT_RANGE
    (LOW-HIGH) the port comes from that range, so processes given disjoint ranges (the test suite's
    parallel workers, several measurement harnesses on one host) never pick the same one."""
    span = _port_range()
    with _LOCK:
        if span is not None:
            low, high = span
            start = (_HANDED[-1] + 1) if _HANDED and low <= _HANDED[-1] < high else low + os.getpid() % (high - low + 1)
            for i in range(high - low + 1):
                port = low + (start - low + i) % (high - low + 1)
                if port not in _HANDED and _bindable(host, port):
                    _HANDED.append(port)
                    return port
            raise ServerError(f"no free port on {host} in {PORT_RANGE_ENV}={low}-{high} that this process was not "
                              "given lately", f"widen {PORT_RANGE_ENV}")
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = int(s.getsockname()[1])
            if port not in _HANDED:
                _HANDED.append(port)
                return port
    raise ServerError(f"no free port on {host} that this process was not given lately (100 tries)")


def reserve(*ports: int) -> None:
    """Ports this process was given (by a flag) but binds later: free_port never hands them out (`embtrt
    up` once gave its own gateway port, still unbound, to its tritonserver's HTTP endpoint)."""
    with _LOCK:
        _HANDED.extend(p for p in ports if p)


def refuse_taken(host: str, ports: dict[str, int]) -> None:
    """ServerError naming every port (by its flag, with the processes holding it) that something already
    listens on or holds, all at once, or two flags given the same port (tritonserver would print its whole
    help and exit). A port 0 (picked later) is never taken."""
    seen: dict[int, str] = {}
    for flag, port in ports.items():
        if port and port in seen:
            raise ServerError(f"{seen[port]} and {flag} are both {port}: each endpoint needs its own port",
                              f"pass another {flag} (0 picks a free one)")
        seen[port] = flag
    taken: list[str] = []
    for flag, port in ports.items():
        if not port:
            continue
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as tritonserver binds: TIME_WAIT is no owner
            try:
                s.bind((host, port))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise ServerError(f"cannot bind {host}:{port} ({flag}): {exc.strerror}") from None
                holder = listening_pids(port)
                who = f", held by process {', '.join(map(str, sorted(holder)))}" if holder else ""
                taken.append(f"{port} ({flag}{who})")
    if taken:
        flags = [t.split("(", 1)[1].split(",")[0].rstrip(")") for t in taken]
        raise ServerError(f"{'port' if len(taken) == 1 else 'ports'} {'; '.join(taken)} on {host} "
                          f"{'is' if len(taken) == 1 else 'are'} already in use",
                          f"stop what holds {'it' if len(taken) == 1 else 'them'}, or pass another "
                          f"{' / '.join(flags)} (0 picks a free one)")


def wait_free(host: str, ports: dict[str, int], timeout_s: float) -> None:
    """Wait until nothing listens on any of `ports` (a server of ours that was just stopped may still
    be closing them); ServerError naming the first one still taken after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            refuse_taken(host, ports)
            return
        except ServerError as exc:
            if time.monotonic() >= deadline:
                first = exc.message.replace("already in use", f"still in use after {timeout_s:g} s")
                raise ServerError(first, "stop what holds it, or serve on other ports") from None
        time.sleep(0.05)


def _listen_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(cols[9])
    return inodes


def listening_pids(port: int, among: set[int] | None = None) -> set[int]:
    """Processes (optionally only among `among`) holding a socket that listens on `port`."""
    inodes = {f"socket:[{i}]" for i in _listen_inodes(port)}
    if not inodes:
        return set()
    pids = among if among is not None else {int(p) for p in os.listdir("/proc") if p.isdigit()}
    out = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    out.add(pid)
                    break
            except OSError:
                continue
    return out
