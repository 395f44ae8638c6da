"""`embtrt serve`: run tritonserver, probe it by real inference, recover, drain on SIGTERM."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import ServerError
from ..repository.manifest import has_manifest, read_manifest
from .probe import probe
from .server import ServerSpec, TritonServer


def front_door(repo: Path) -> str:
    """The front-door model name from embtrt.json (or the only non-suffixed model)."""
    if not has_manifest(repo):
        raise ServerError(f"{repo} has no embtrt.json", "serve a repository written by `embtrt build`")
    return read_manifest(repo).name


class Supervisor:
    def __init__(self, spec: ServerSpec, probe_interval_s: float = 5.0, failures_to_recover: int = 2,
                 log: Callable[[str], None] = print) -> None:
        self.spec = spec
        self.interval = probe_interval_s
        self.failures_to_recover = failures_to_recover
        self.log = log
        self.models = [front_door(r) for r in spec.repositories]
        self.model = self.models[0]
        self.server: TritonServer | None = None
        self._stop = threading.Event()
        self.recoveries = 0

    def _start(self) -> None:
        self.server = TritonServer(self.spec)
        self.server.start()
        self.server.wait_ready()

    def restart(self, reason: str) -> None:
        self.log(f"recovering: {reason}; restarting tritonserver")
        t0 = time.time()
        if self.server is not None:
            self.server.stop(timeout_s=5)
        self._start()
        self.recoveries += 1
        r = self._probe()
        self.log(f"recovered in {time.time() - t0:.1f} s; probe {r.summary()}")

    def _probe(self):
        """Each model's front door and its buckets; the first failure, else the last result."""
        assert self.server is not None
        r = None
        for m in self.models:
            r = probe(self.server.grpc_url, m)
            if not r.ok:
                return r
        return r

    def request_stop(self, *_: object) -> None:
        self._stop.set()

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        self._start()
        srv = self.server
        assert srv is not None
        self.log(f"ready: model{'s' if len(self.models) > 1 else ''} {', '.join(self.models)}")
        self.log(f"  gRPC    {srv.grpc_url}")
        self.log(f"  HTTP    {srv.http_url}")
        self.log(f"  metrics {srv.metrics_url}")
        self.log(f"  log     {srv.log_path}")
        self.log("Ctrl-C or SIGTERM stops it after in-flight requests finish")
        failures = 0
        try:
            while not self._stop.wait(self.interval if self.interval > 0 else 3600):
                srv = self.server
                assert srv is not None
                if srv.proc is not None and srv.proc.poll() is not None:
                    self.restart(f"tritonserver exited with code {srv.proc.returncode}")
                    failures = 0
                    continue
                if self.interval <= 0:
                    continue
                r = self._probe()
                if r.ok:
                    failures = 0
                    continue
                failures += 1
                self.log(f"probe {failures}/{self.failures_to_recover} {r.summary()}")
                if failures >= self.failures_to_recover:
                    self.restart(r.summary())
                    failures = 0
        finally:
            if self.server is not None:
                self.log("stopping: draining in-flight requests")
                code = self.server.stop(drain=True)
                self.log(f"tritonserver exited with code {code}")
