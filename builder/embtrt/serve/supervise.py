"""`embtrt serve`: run tritonserver, probe it by real inference, recover, drain on SIGTERM."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Callable

from embtrt_backend import liveness

from ..errors import ServerError
from ..repository.manifest import has_manifest, read_manifest
from .health import Health
from .launch import launch
from .ports import wait_free
from .probe import probe
from .server import ServerSpec, TritonServer


STOP_LINE = ("Ctrl-C stops it: requests running finish, queued ones are refused UNAVAILABLE (clients retry them "
             "elsewhere); SIGTERM first serves {grace:g} s more (--drain-grace)")


def front_door(repo: Path) -> str:
    """The front-door model name from embtrt.json (or the only non-suffixed model)."""
    if not has_manifest(repo):
        raise ServerError(f"{repo} has no embtrt.json", "serve a repository written by `embtrt build`")
    return read_manifest(repo).name


def _stopped(pid: int) -> bool:
    """Whether a process is stopped by a signal (state T in /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].startswith("T")


class Supervisor:
    """Runs tritonserver and keeps it alive, telling a dead server from a busy one.

    Liveness (every `liveness_s`, cheap, never an inference): the server process is running and
    every Python-backend instance of every loaded model has its stub (embtrt_backend.liveness; a
    dead stub is the failure Triton's own live endpoint misses). A failed liveness check restarts
    the server at once; the server's exit is noticed within one tick, whatever the probe interval.
    The inference probe (every `probe_interval_s`) decides readiness only: a probe that fails while
    Triton has requests pending or finishing them is a busy server, never a reason to restart;
    `failures_to_recover` failed probes of an idle server restart it.

    Readiness is answered on `health_port` (serve.health; None: not served): ready once its own
    server is up, then as the last probe says; not ready while recovering and from SIGTERM on,
    before the drain starts.
    """

    def __init__(self, spec: ServerSpec, probe_interval_s: float = 5.0, failures_to_recover: int = 2,
                 log: Callable[[str], None] = print, liveness_s: float = 1.0, probe_timeout_s: float = 10.0,
                 health_port: int | None = None, drain_grace_s: float = 5.0,
                 on_ready: Callable[["Supervisor"], None] | None = None,
                 on_stop: Callable[[], None] | None = None) -> None:
        self.spec = spec
        # `embtrt up`: what starts once the server is first ready (the gateway; it announces itself) and
        # what stops before the server drains
        self.on_ready, self.on_stop = on_ready, on_stop
        self.drain_grace_s = drain_grace_s
        self._grace = 0.0   # the grace of the signal that stops it: SIGTERM's drain_grace_s, none on Ctrl-C
        self.health = Health()
        self.health_port = health_port
        self.probe_timeout_s = probe_timeout_s
        self.interval = probe_interval_s
        self.failures_to_recover = failures_to_recover
        self.liveness_s = liveness_s
        self.log = log
        self.models = [front_door(r) for r in spec.repositories]
        self.server: TritonServer | None = None
        self._stop = threading.Event()
        self._paused = False

    def _start(self) -> None:
        self.health.set(False, "starting tritonserver", "starting")
        self.server = TritonServer(self.spec)
        launch(self.server, should_stop=self._stop.is_set, log=self.log)

    def restart(self, reason: str) -> None:
        self.log(f"recovering: {reason}; restarting tritonserver")
        self.health.set(False, "recovering: restarting tritonserver", "recovering")
        t0 = time.time()
        if self.server is not None:
            # a broken server is killed, not shut down (its unload may hang on dead stubs), and the
            # new one starts once the old one has let go of the ports
            self.server.stop(timeout_s=5, kill=True)
        wait_free(self.spec.host, self.spec.ports, timeout_s=30)
        self._start()
        assert self.server is not None
        r = self._probe()
        self.health.set(r.ok, "probe failed after the restart", "serving")
        self.log(f"recovered in {time.time() - t0:.1f} s; probe {r.summary()}; log {self.server.log_path}")

    def _probe(self):
        """Each model's front door and its buckets; the first failure, else the last result."""
        assert self.server is not None
        r = None
        for m in self.models:
            r = probe(self.server.grpc_url, m, timeout_s=self.probe_timeout_s)
            if not r.ok:
                return r
        return r

    def not_live(self) -> list[str]:
        """Why the server is not live ([] when it is): its process, Triton's live endpoint, its stubs.
        A tritonserver stopped by a signal (SIGSTOP: a debugger, a benchmark pausing it while it
        measures another server) is paused, not dead: it is left alone, and not ready meanwhile."""
        srv = self.server
        assert srv is not None
        if srv.proc is None or srv.proc.poll() is not None:
            return [f"tritonserver exited with code {None if srv.proc is None else srv.proc.returncode}"]
        pid = srv.server_pid()
        dead: list[str] = []
        if pid is None or not _stopped(pid):
            dead = liveness.check(srv.http_url, [str(r.resolve()) for r in self.spec.repositories], pids=srv.pids())
        # stopped before the check, or while it waited on the live endpoint (a pause that began
        # mid-check times the check out): paused either way, never a reason to restart
        if pid is not None and _stopped(pid):
            if not self._paused:
                self._paused = True
                self.log(f"tritonserver (process {pid}) is stopped (SIGSTOP): paused, not restarted")
                self.health.update(False, "tritonserver is stopped (SIGSTOP)")
            return []
        if self._paused:
            self._paused = False
            self.log("tritonserver continues (SIGCONT)")
            self.health.update(True)
        return dead

    def request_stop(self, signum: int = signal.SIGTERM, *_: object) -> None:
        self.health.draining()   # not ready before anything else: the balancer stops sending while we drain
        if not self._stop.is_set():
            self._grace = self.drain_grace_s if signum == signal.SIGTERM else 0.0
        self._stop.set()

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        if self.health_port is not None:
            port = self.health.serve(self.spec.host, self.health_port)
            self.health_url = f"http://{self.spec.host}:{port}"
        try:
            self._start()
            self._serve()
        except ServerError:
            if not self._stop.is_set():
                raise
        finally:
            if self.on_stop is not None:
                self.on_stop()
            if self.server is not None and self.server.proc is not None:
                self._stop_server()
            self.health.close()

    def _stop_server(self) -> None:
        srv = self.server
        assert srv is not None
        self.log(f"stopping: serving {self._grace:g} s more while balancers update, then refusing new "
                 "requests (UNAVAILABLE) until those in flight have finished")
        code = srv.stop(drain=True, grace_s=self._grace)
        d = srv.drained
        if d is not None:
            self.log(f"drained: refused new requests for {d.refusing_s:.1f} s; "
                     + ("nothing left in flight, tritonserver stopped at once" if d.idle else
                        f"requests still in flight after {self.spec.drain_s:g} s "
                        f"({d.busy_left} models still running a call): tritonserver's own shutdown finishes them"))
        if d is not None and d.idle and code in (-signal.SIGKILL, 128 + signal.SIGKILL):
            self.log("stopped (tritonserver was killed once nothing was in flight: its models hold no state)")
        else:
            self.log(f"stopped: tritonserver exited with code {code}")

    def _serve(self) -> None:
        srv = self.server
        assert srv is not None
        if self.on_ready is not None:
            self.on_ready(self)
        else:
            self.log(f"ready: model{'s' if len(self.models) > 1 else ''} {', '.join(self.models)}")
            self.log(f"  gRPC    {srv.grpc_url}")
            self.log(f"  HTTP    {srv.http_url} (Triton's own KServe v2 API; the OpenAI, TEI and Cohere routes are "
                     "`embtrt gateway`'s, or one command: `embtrt up`)")
            self.log(f"  metrics {srv.metrics_url}")
            self.log(f"  log     {srv.log_path}")
            if self.health_port is not None:
                self.log(f"  health  {self.health_url}/ready (503 from SIGTERM on), {self.health_url}/live")
        self.health.set(True, "", "serving")
        self.log(STOP_LINE.format(grace=self.drain_grace_s))
        failures = 0
        tick = min(self.liveness_s, self.interval) if self.interval > 0 else self.liveness_s
        next_probe = time.monotonic() + self.interval
        while not self._stop.wait(tick):
            dead = self.not_live()
            self.health.checked()
            if dead:
                self.restart("; ".join(dead))
                failures = 0
                next_probe = time.monotonic() + self.interval
                continue
            if self.interval <= 0 or time.monotonic() < next_probe:
                continue
            next_probe = time.monotonic() + self.interval
            srv = self.server
            assert srv is not None
            before = srv.activity()
            r = self._probe()
            self.health.update(r.ok, f"probe {r.summary()}")
            if r.ok:
                failures = 0
                continue
            after = srv.activity()
            if before is not None and after is not None and (after[0] > 0 or after[1] > before[1]):
                self.log(f"probe {r.summary()} while the server is busy ({after[0]:.0f} pending, "
                         f"{after[1] - before[1]:.0f} finished meanwhile): not a reason to restart")
                failures = 0
                continue
            failures += 1
            self.log(f"probe {failures}/{self.failures_to_recover} {r.summary()}")
            if failures >= self.failures_to_recover:
                self.restart(r.summary())
                failures = 0
