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
    monkeypatch.delenv(ports.PORT_RANGE_ENV, raising=False)   # the kernel's choice, not a range's
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


def test_a_port_range_keeps_two_processes_apart_and_skips_taken_ports(monkeypatch):
    """$EMBTRT_PORT_RANGE: every port from the range, none handed twice, one something listens on skipped;
    two processes given disjoint ranges (the suite's parallel workers) cannot pick the same port."""
    monkeypatch.setattr(ports, "_HANDED", ports.collections.deque(maxlen=512))
    with socket.socket() as held:   # below the kernel's ephemeral range: only explicit binds use these
        taken = next(p for p in range(15002, 15900, 7) if ports._bindable("127.0.0.1", p))
        held.bind(("127.0.0.1", taken))
        held.listen(1)
        low = taken - 2
        monkeypatch.setenv(ports.PORT_RANGE_ENV, f"{low}-{low + 5}")
        got = [ports.free_port() for _ in range(5)]
        with pytest.raises(ServerError, match="no free port .* in EMBTRT_PORT_RANGE"):
            ports.free_port()
    assert len(set(got)) == 5 and all(low <= p <= low + 5 for p in got) and taken not in got


def test_a_port_given_by_a_flag_but_not_bound_yet_is_never_handed_out(monkeypatch):
    """#73: `embtrt up --port P` gave P, still unbound (the gateway binds it once tritonserver is ready), to
    its own tritonserver's HTTP endpoint, and then refused its gateway's port as taken; reserved, it is skipped."""
    monkeypatch.setattr(ports, "_HANDED", ports.collections.deque(maxlen=512))
    low = next(p for p in range(16002, 16900, 7) if all(ports._bindable("127.0.0.1", q) for q in (p, p + 1)))
    monkeypatch.setenv(ports.PORT_RANGE_ENV, f"{low}-{low + 1}")
    monkeypatch.setattr(ports.os, "getpid", lambda: 0)   # the range's first port is the first pick
    ports.reserve(low)
    assert ports.free_port() == low + 1
    monkeypatch.setattr(ports, "_HANDED", ports.collections.deque(maxlen=512))
    assert ports.free_port() == low   # unreserved, the flag's port was the first pick


@pytest.mark.parametrize("value", ["20000", "b-c", "80-90", "30000-20000", "60000-70000"])
def test_a_bad_port_range_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(ports.PORT_RANGE_ENV, value)
    with pytest.raises(ServerError, match="EMBTRT_PORT_RANGE"):
        ports.free_port()
