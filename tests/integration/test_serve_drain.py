"""#54: stopping `embtrt serve` while clients send never answers "unknown model" (NOT_FOUND): each
request is served, or refused UNAVAILABLE (which clients retry elsewhere); the ones in flight finish.
Real tritonservers on 127.0.0.1, free ports; plain tritonclient gRPC clients without retries."""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from embtrt.serve.client import EmbeddingClient
from embtrt.serve.server import free_port
from embtrt.serve.wire import text_input
from waiting import until

pytestmark = pytest.mark.integration
EMBTRT = str(Path(sys.executable).parent / "embtrt")
# the tiny Qwen3 repository's front door calls its bucket encoders over BLS: the calls Triton's own
# shutdown refuses to a front-door request still running
KEY, MODEL = "qwen3-last", "qwen3_last"
TEXTS = [f"request {i}: " + "words of a text " * (1 + i % 7) for i in range(24)]


class Serve:
    def __init__(self, repo: Path, tmp: Path, *args: str) -> None:
        self.grpc, self.http, self.metrics = free_port(), free_port(), free_port()
        self.url = f"127.0.0.1:{self.grpc}"
        self.log = tmp / f"serve-{self.grpc}.log"
        self.proc = subprocess.Popen([EMBTRT, "serve", str(repo), "--grpc-port", str(self.grpc), "--http-port",
                                      str(self.http), "--metrics-port", str(self.metrics), "--health-port", "0",
                                      "--probe-interval", "0", "--log-file", str(tmp / f"tritonserver-{self.grpc}.log"), *args],
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        until(lambda: "ready: model" in self.text() or self.proc.poll() is not None, 180, "serve ready")
        assert self.proc.poll() is None, self.text()

    def text(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()   # its reaper takes tritonserver and the stubs with it
        self.proc.wait(timeout=30)


class Senders:
    """`n` clients, each on its own gRPC channel, sending one text per request without pause and
    recording (status, sent, answered, text index, vector)."""

    def __init__(self, url: str, n: int, batches: list[list[str]] | None = None) -> None:
        self.url, self.stop = url, threading.Event()
        self.batches = batches or [[t] for t in TEXTS]
        self.done: list[tuple[str, float, float, int, object]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, k: int) -> None:
        c = grpcclient.InferenceServerClient(self.url)
        i = k
        try:
            while not self.stop.is_set():
                j = i % len(self.batches)
                t0 = time.monotonic()
                try:
                    r = c.infer(MODEL, [text_input(self.batches[j])], client_timeout=30)
                    got = ("OK", t0, time.monotonic(), j, r.as_numpy("EMBEDDING"))
                except InferenceServerException as exc:
                    got = (str(exc.status()), t0, time.monotonic(), j, str(exc))
                    time.sleep(0.01)   # a refused client backs off a little, as any client does
                with self.lock:
                    self.done.append(got)
                i += 1
        finally:
            c.close()

    def ok_count(self) -> int:
        with self.lock:
            return sum(d[0] == "OK" for d in self.done)

    def mid_call(self, n: int) -> bool:
        """At least `n` calls answered, and the last answer came a third of the usual time between calls
        ago with none since: the front door is inside its next call, not between two (a signal sent as an
        answer arrives may find the next call not yet begun, and nothing in flight). Answers less than
        5 ms apart are one call's (it takes two requests)."""
        with self.lock:
            ends = sorted(d[2] for d in self.done if d[0] == "OK")
        calls = [t for i, t in enumerate(ends) if i == 0 or t - ends[i - 1] > 0.005]
        if len(calls) < n:
            return False
        gap = float(np.median(np.diff(calls)))
        return time.monotonic() - ends[-1] >= gap / 3

    def finish(self) -> list:
        self.stop.set()
        for t in self.threads:
            t.join(60)
        return list(self.done)


def test_sigterm_under_load_serves_the_grace_then_refuses_unavailable_and_never_answers_not_found(tiny_repos, tmp_path):
    # two seconds of grace: on a loaded machine a request waits behind the 7 others' for up to ~1 s,
    # and one still queued when refusing begins is refused (nothing was computed for it)
    s = Serve(tiny_repos[KEY], tmp_path, "--drain-grace", "2")
    try:
        with EmbeddingClient(s.url, MODEL) as c:
            expected = c.embed(TEXTS)
        senders = Senders(s.url, 8)
        until(lambda: senders.ok_count() >= 40, 60, "40 requests served before the signal")
        t_sig = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        code = s.proc.wait(timeout=40)
        t_exit = time.monotonic()
        until(lambda: sum(d[1] > t_exit for d in list(senders.done)) >= 8, 60, "the clients meeting the closed port")
        done = senders.finish()
    finally:
        s.kill()
    log = s.text()
    statuses = collections.Counter(d[0] for d in done)
    assert code == 0, (code, log[-2000:])
    assert "StatusCode.NOT_FOUND" not in statuses, statuses
    assert set(statuses) <= {"OK", "StatusCode.UNAVAILABLE"}, \
        (statuses, [d[4][:200] for d in done if d[0] not in ("OK", "StatusCode.UNAVAILABLE")][:3])
    # every request sent before the signal was in flight at it, or queued: each one answered
    before = [d for d in done if d[1] < t_sig]
    assert before and all(d[0] == "OK" for d in before), [d[4][:200] for d in before if d[0] != "OK"][:3]
    # the grace was served: requests sent well after the signal were answered; then the front door
    # refused (its own words), then the port closed
    late = [d[2] - t_sig for d in done if d[0] == "OK" and d[1] > t_sig + 0.5]
    assert late, (statuses, sorted(d[2] - d[1] for d in done if d[0] == "OK")[-5:])
    refused = [d[4] for d in done if d[0] == "StatusCode.UNAVAILABLE"]
    assert any("draining" in m for m in refused), refused[:3]
    for status, _, _, j, vec in done:
        if status == "OK":
            np.testing.assert_allclose(vec[0], expected[j], atol=1e-5, err_msg=f"text {j}")
    assert "nothing left in flight, tritonserver stopped at once" in log, log[-2000:]


def test_ctrl_c_refuses_at_once_but_finishes_the_requests_in_flight(tiny_repos, tmp_path):
    """SIGINT: no grace. Requests running at the signal (large ones, from 6 clients) still come back
    whole and right; queued ones are refused in the front door's words; none is cut off. The signal must
    find a call running: when it came between two (the clients' turnaround: on a loaded machine they can be
    slow to send again), nothing was in flight to finish, and the scenario runs again (at most 3 times)."""
    batches = [[TEXTS[(k + i) % len(TEXTS)] * 40 for i in range(16)] for k in range(4)]
    for _ in range(3):
        s = Serve(tiny_repos[KEY], tmp_path)
        try:
            with EmbeddingClient(s.url, MODEL) as c:
                expected = [c.embed(b) for b in batches]
            senders = Senders(s.url, 6, batches)
            until(lambda s=senders: s.mid_call(6), 60, "6 calls of large requests served, then one under way")
            t_sig = time.monotonic()
            s.proc.send_signal(signal.SIGINT)
            code = s.proc.wait(timeout=40)
            done = senders.finish()
            after = subprocess.run([sys.executable, "-c", f"import tritonclient.grpc as g; g.InferenceServerClient("
                                    f"'{s.url}').is_server_live()"], capture_output=True, text=True, timeout=60)
        finally:
            s.kill()
        log = s.text()
        assert code == 0, log[-2000:]
        before = [d for d in done if d[1] < t_sig]
        # each request sent before the signal was answered whole or refused as draining: none cut off
        assert all(d[0] == "OK" or (d[0] == "StatusCode.UNAVAILABLE" and "draining" in d[4]) for d in before), \
            [d[4][:200] for d in before if d[0] != "OK"][:3]
        if any(d[0] == "OK" and d[2] > t_sig for d in before):   # the ones running at the signal finished after it
            break
    else:
        raise AssertionError(f"in 3 tries the signal never found a call running: {[(d[0], d[2] - t_sig) for d in before[-6:]]}")
    for status, _, _, j, vec in done:
        if status == "OK":
            np.testing.assert_allclose(vec, expected[j], atol=1e-5, err_msg=f"batch {j}")
    assert "serving 0 s more" in log and "nothing left in flight" in log, log[-2000:]
    # #73: the banner says where the HTTP APIs users call are, and what Ctrl-C does to queued requests
    assert "the OpenAI, TEI and Cohere routes are `embtrt gateway`'s" in log and "queued ones are refused" in log, log[:2000]
    assert after.returncode != 0 and "UNAVAILABLE" in after.stderr   # the port is closed: retried elsewhere


def test_draining_one_of_two_replicas_fails_no_request_through_the_gateway_or_the_client(tiny_repos, tmp_path):
    """Two replicas; one gets SIGTERM under load. The gateway (its pools list both) and an
    EmbeddingClient given both addresses retry its refusals on the other: no request fails."""
    from openai import OpenAI

    from embtrt.repository.manifest import read_manifest
    from test_gateway import _metric, gateway

    a, b = Serve(tiny_repos[KEY], tmp_path, "--drain-grace", "1"), Serve(tiny_repos[KEY], tmp_path)
    m = read_manifest(tiny_repos[KEY])
    pools = [x for bk in m.buckets for x in ("--pool", f"{bk}={a.url},{b.url}")]
    failures: list[str] = []
    served: list[tuple[int, np.ndarray, float]] = []
    stop, lock = threading.Event(), threading.Lock()
    try:
        with EmbeddingClient(b.url, MODEL) as c:
            expected = c.embed(TEXTS)
        with gateway(tiny_repos[KEY], tmp_path / "gw.log", "--route", "frontdoor", *pools) as u:
            def http_sender(k: int) -> None:
                client = OpenAI(base_url=u + "/v1", api_key="unused", max_retries=0, timeout=30)
                i = k
                while not stop.is_set():
                    j = i % len(TEXTS)
                    try:
                        r = client.embeddings.create(model=MODEL, input=[TEXTS[j]], encoding_format="float")
                        with lock:
                            served.append((j, np.asarray(r.data[0].embedding), time.monotonic()))
                    except Exception as exc:  # noqa: BLE001 (recorded, asserted below)
                        failures.append(f"gateway: {exc}")
                    i += 1

            def grpc_sender(k: int) -> None:
                with EmbeddingClient(f"{a.url},{b.url}", MODEL) as c:
                    i = k
                    while not stop.is_set():
                        j = i % len(TEXTS)
                        try:
                            v = c.embed([TEXTS[j]])[0]
                            with lock:
                                served.append((j, v, time.monotonic()))
                        except Exception as exc:  # noqa: BLE001 (recorded, asserted below)
                            failures.append(f"client: {exc}")
                        i += 1

            threads = [threading.Thread(target=http_sender, args=(k,), daemon=True) for k in range(4)]
            threads += [threading.Thread(target=grpc_sender, args=(k,), daemon=True) for k in range(4)]
            for t in threads:
                t.start()
            until(lambda: len(served) >= 40, 60, "40 requests served before the signal")
            a.proc.send_signal(signal.SIGTERM)
            assert a.proc.wait(timeout=40) == 0, a.text()[-2000:]
            t_exit = time.monotonic()
            until(lambda: sum(s[2] > t_exit for s in served) >= 40, 60, "40 requests served after it exited")
            stop.set()
            for t in threads:
                t.join(60)
            retried = _metric(u, "embtrt_gateway_upstream_retries_total")
    finally:
        stop.set()
        a.kill()
        b.kill()
    assert not failures, failures[:3]
    for j, v, _ in served:
        np.testing.assert_allclose(v, expected[j], atol=1e-5, err_msg=f"text {j}")
    assert "nothing left in flight" in a.text(), a.text()[-2000:]
    assert retried >= 1
