"""Ports for the servers embtrt starts: free_port never hands out a port twice in a row (the kernel
may: a fresh-clone CI run failed when a tritonserver got one port for its HTTP and metrics endpoints),
and a server given one port for two endpoints is refused with a clear message before it starts."""

from __future__ import annotations

import socket

import pytest

from embtrt.errors import ServerError
from embtrt.serve import ports


class _Kernel:
    """socket.socket stand-in whose bind(port 0) is given these ports in turn (the kernel's choice)."""

    def __init__(self, given: list[int]) -> None:
        self.given = given

    def __call__(self, *a, **kw):
        kernel = self

        class Sock:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def bind(self, addr):
                self.port = kernel.given.pop(0)

            def getsockname(self):
                return ("127.0.0.1", self.port)

        return Sock()


def test_a_port_the_kernel_gives_twice_in_a_row_is_not_handed_out_twice(monkeypatch):
    monkeypatch.setattr(ports, "_HANDED", ports.collections.deque(maxlen=512))
    monkeypatch.setattr(ports.socket, "socket", _Kernel([40001, 40001, 40001, 40002, 40003]))
    assert [ports.free_port(), ports.free_port(), ports.free_port()] == [40001, 40002, 40003]


def test_one_port_for_two_endpoints_is_refused_naming_both_flags():
    p = ports.free_port()
    with pytest.raises(ServerError, match=f"--http-port and --metrics-port are both {p}"):
        ports.refuse_taken("127.0.0.1", {"--grpc-port": ports.free_port(), "--http-port": p, "--metrics-port": p})


def test_free_ports_are_distinct_and_bindable():
    got = [ports.free_port() for _ in range(50)]
    assert len(set(got)) == 50
    with socket.socket() as s:
        s.bind(("127.0.0.1", got[-1]))
