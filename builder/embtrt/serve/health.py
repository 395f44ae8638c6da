"""`embtrt serve`'s own health endpoint (--health-port): what a load balancer or kubelet in front of
`embtrt serve` asks, answered from the supervisor's state, never by an inference per call.

GET /ready  200 {"ready": true} while its own tritonserver is up and the last inference probe
            passed; 503 {"ready": false, "reason": ...} while starting, recovering, after a failed
            probe, and from the moment SIGTERM arrives (the drain then runs while the balancer
            stops sending).
GET /live   200 {"live": true, "state": ..., "checks": n} while the supervisor runs (a recovery in
            progress is live: it is the supervisor's job, not a reason to restart it); `checks` counts
            the liveness checks it has made (one a tick): a count that stops growing is a stuck loop.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..errors import ServerError


class Health:
    """The supervisor's readiness, thread-safe; `serve()` answers it over HTTP in a daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready, self._reason, self._state = False, "starting", "starting"
        self.checks = 0
        self._httpd: ThreadingHTTPServer | None = None

    def set(self, ready: bool, reason: str, state: str) -> None:
        """The supervisor's own step (starting, recovering, serving), ignored once stopping."""
        with self._lock:
            if self._state != "stopping":
                self._ready, self._reason, self._state = ready, ("" if ready else reason), state

    def draining(self) -> None:
        """Not ready from now on, for good (SIGTERM): later probe results do not make it ready again."""
        with self._lock:
            self._ready, self._reason, self._state = False, "draining: stopping after in-flight requests", "stopping"

    def snapshot(self) -> tuple[bool, str, str]:
        with self._lock:
            return self._ready, self._reason, self._state

    def checked(self) -> None:
        """One liveness check made (the supervisor's tick)."""
        with self._lock:
            self.checks += 1

    def update(self, ready: bool, reason: str = "") -> None:
        """A probe's verdict, ignored once stopping."""
        with self._lock:
            if self._state == "stopping":
                return
            self._ready, self._reason = ready, ("" if ready else reason)
            self._state = "serving" if ready else self._state if self._state != "serving" else "degraded"

    def serve(self, host: str, port: int) -> int:
        """Start answering on host:port (0: a free port); -> the port. A taken port is a ServerError."""
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:   # noqa: N802 (http.server's name)
                ready, reason, state = health.snapshot()
                body: dict[str, object]
                if self.path.split("?")[0] == "/ready":
                    code = 200 if ready else 503
                    body = {"ready": True} if ready else {"ready": False, "reason": reason}
                elif self.path.split("?")[0] == "/live":
                    code, body = 200, {"live": True, "state": state, "checks": health.checks}
                else:
                    code, body = 404, {"error": "not found: GET /ready or /live"}
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_args) -> None:   # probes every few seconds: no access log
                pass

        try:
            self._httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise ServerError(f"cannot bind {host}:{port} (--health-port): {exc.strerror}",
                              "stop what holds it, or pass another --health-port (0 picks a free one)") from None
        self._httpd.daemon_threads = True
        self._httpd.timeout = 5
        threading.Thread(target=self._httpd.serve_forever, name="embtrt-health", daemon=True).start()
        return int(self._httpd.server_address[1])

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
