"""TritonServer.stop returns only when nothing of the server is left: no process of its group, no
socket on its ports. CI (issues ci, stop 59) saw `embtrt serve`'s restart after killed stubs fail
with "port ... (--grpc-port) is already in use" and no holder: the old tritonserver ignored (or was
slow to act on) SIGTERM, the whole group was SIGKILLed, the reaper died at once and stop() returned
while tritonserver was still tearing down its memory, its listening socket still open.

Here a stand-in for tritonserver (run under the real reaper, as tritonserver is) listens on the
gRPC port, ignores SIGTERM and holds ~512 MiB of touched memory, so its exit after SIGKILL takes
time, as a loaded tritonserver's does. Bounded: each server lives a few seconds."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from embtrt.errors import ServerError
from embtrt.serve.ports import group_pids, refuse_taken, wait_free
from embtrt.serve.server import ServerSpec, TritonServer, free_port

STAND_IN = r"""
import signal, socket, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
ballast = b"\x01" * (512 << 20)
open(sys.argv[2], "w").write("up")
time.sleep(120)
"""


class StandIn(TritonServer):
    def __init__(self, spec: ServerSpec, script: Path, up: Path) -> None:
        super().__init__(spec)
        self.script, self.up = script, up

    def command(self) -> list[str]:
        return [sys.executable, str(self.script), str(self.spec.grpc_port), str(self.up)]


@pytest.fixture
def stand_in(tmp_path):
    (tmp_path / "repo" / "m").mkdir(parents=True)
    (tmp_path / "repo" / "m" / "config.pbtxt").write_text('name: "m"\n')
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    spec = ServerSpec(tmp_path / "repo", grpc_port=free_port(), http_port=free_port(), metrics_port=free_port())
    servers = []

    def start() -> StandIn:
        up = tmp_path / f"up{len(servers)}"
        srv = StandIn(spec, script, up)
        servers.append(srv)
        srv.start()
        deadline = time.monotonic() + 30
        while not up.exists():
            assert srv.proc is not None and srv.proc.poll() is None, "the stand-in exited"
            assert time.monotonic() < deadline, "the stand-in did not come up in 30 s"
            time.sleep(0.05)
        return srv

    yield start
    for srv in servers:
        srv.stop(timeout_s=0.2)


@pytest.mark.parametrize("kill", [False, True])
def test_stop_returns_when_the_group_is_gone_and_its_port_free(stand_in, kill):
    srv = stand_in()
    pgid = srv.proc.pid
    srv.stop(timeout_s=0.2, kill=kill)
    assert group_pids(pgid) == set(), "stop() returned with processes of the server's group alive"
    refuse_taken("127.0.0.1", {"--grpc-port": srv.spec.grpc_port})   # raises while a socket listens on it


def test_a_restarted_server_gets_its_ports_back_at_once(stand_in):
    """What `embtrt serve` does when it recovers: stop the broken server, start one on the same ports."""
    first = stand_in()
    first.stop(timeout_s=0.2, kill=True)
    second = stand_in()
    assert second.proc.poll() is None


def test_wait_free_waits_for_a_port_to_be_let_go_and_names_one_that_is_not(tmp_path):
    port = free_port()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    try:
        held = f"port {port} \\(--grpc-port, held by process {os.getpid()}\\) on 127.0.0.1"
        with pytest.raises(ServerError, match=f"{held} is still in use after 0.3 s"):
            wait_free("127.0.0.1", {"--grpc-port": port}, timeout_s=0.3)
    finally:
        holder.close()
    wait_free("127.0.0.1", {"--grpc-port": port}, timeout_s=30)   # returns once it sees the port free, else raises
