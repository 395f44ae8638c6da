"""Who holds a port: refuse ports already taken, and check that the server answering on a port is
our own child, not an orphan of an earlier run or another program (Linux /proc)."""

from __future__ import annotations

import errno
import os
import socket

from ..errors import ServerError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def refuse_taken(host: str, ports: dict[str, int]) -> None:
    """ServerError naming the first port (by its flag) that something already listens on or holds."""
    for flag, port in ports.items():
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as tritonserver binds: TIME_WAIT is no owner
            try:
                s.bind((host, port))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise ServerError(f"cannot bind {host}:{port} ({flag}): {exc.strerror}") from None
                holder = listening_pids(port)
                who = f" (process {', '.join(map(str, sorted(holder)))})" if holder else ""
                raise ServerError(f"port {port} on {host} ({flag}) is already in use{who}",
                                  f"stop what holds it, or pass another {flag} (0 picks a free one)") from None


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


def group_pids(pgid: int) -> set[int]:
    """Every live process of a process group."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.add(int(entry))
    return out
