"""embtrt serve's health endpoint (serve.health): readiness from the supervisor's state, 503 for
good once draining, liveness apart from readiness, a taken port refused naming the flag."""

import json
import socket
import urllib.error
import urllib.request

import pytest

from embtrt.errors import ServerError
from embtrt.serve.health import Health


def _get(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_ready_follows_the_supervisor_and_draining_is_final():
    h = Health()
    port = h.serve("127.0.0.1", 0)
    try:
        assert _get(port, "/ready") == (503, {"ready": False, "reason": "starting"})
        assert _get(port, "/live") == (200, {"live": True, "state": "starting", "checks": 0})
        h.set(True, "", "serving")
        assert _get(port, "/ready") == (200, {"ready": True})
        h.update(False, "probe failed: timeout")
        assert _get(port, "/ready") == (503, {"ready": False, "reason": "probe failed: timeout"})
        assert _get(port, "/live")[1]["state"] == "degraded"
        h.update(True)
        assert _get(port, "/ready") == (200, {"ready": True})
        h.draining()
        h.update(True)                       # a probe that passes during the drain changes nothing
        h.set(True, "", "serving")
        code, body = _get(port, "/ready")
        assert code == 503 and body["reason"].startswith("draining")
        h.checked()
        assert _get(port, "/live") == (200, {"live": True, "state": "stopping", "checks": 1})
        assert _get(port, "/other")[0] == 404
    finally:
        h.close()


def test_a_taken_health_port_is_refused_naming_the_flag():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        with pytest.raises(ServerError, match="--health-port"):
            Health().serve("127.0.0.1", held.getsockname()[1])
