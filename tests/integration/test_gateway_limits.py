"""The gateway takes only work it can finish and keeps its connections in hand (#29): token ids only when
asked, caps per request, a concurrency cap, header and body timeouts, a large request that does not hold
up small ones, and a readiness endpoint that does not run an inference per call. A real tritonserver and
gateway on 127.0.0.1; waits are bounded and synchronised on observed state."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
import tritonclient.grpc as grpcclient

from test_gateway import NAME, _envelope, _post, gateway
from waiting import until

pytestmark = pytest.mark.integration


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """Whether the server closes the connection (recv gives b"" or a reset) within `within_s`."""
    sock.settimeout(within_s)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_token_ids_are_refused_by_default_and_text_is_served(minilm_repo, minilm_server, tmp_path):
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url) as u:
        err = _envelope(_post(u, {"model": NAME, "input": [[101, 7592, 102]]}), 400, "token-id input is off on this gateway")
        assert err["code"] == "token_ids_disabled" and "check_embedding_ctx_length=False" in err["message"]
        assert _post(u, {"model": NAME, "input": "hello"}).status_code == 200


def test_requests_over_the_caps_get_413_naming_the_cap(minilm_repo, minilm_server, tmp_path):
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url, "--max-request-chars", "100",
                 "--max-request-tokens", "40") as u:
        err = _envelope(_post(u, {"model": NAME, "input": ["x" * 60, "y" * 60]}), 413, "--max-request-chars")
        assert "the input has 120 characters; this gateway takes at most 100" in err["message"]
        err = _envelope(_post(u, {"model": NAME, "input": ["a b c d e f g h i j k l m n o p q r s t u v w x y"] * 2}),
                        413, "--max-request-tokens")
        assert "the input has 54 tokens; this gateway takes at most 40" in err["message"]
        assert _post(u, {"model": NAME, "input": ["a b c", "d e"]}).status_code == 200


def test_slow_header_and_slow_body_clients_are_cut(minilm_repo, minilm_server, tmp_path):
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url, "--header-timeout", "1",
                 "--body-timeout", "1") as u:
        port = _port(u)
        idle = socket.create_connection(("127.0.0.1", port))          # connects and says nothing
        slow_head = socket.create_connection(("127.0.0.1", port))     # headers that never end
        slow_head.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")
        slow_body = socket.create_connection(("127.0.0.1", port))     # a body that never comes
        slow_body.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100\r\n\r\n{\"model\": ")
        try:
            assert _closed_by_server(idle, 20) and _closed_by_server(slow_head, 20)
            slow_body.settimeout(20)
            answer = b""
            while chunk := slow_body.recv(4096):   # to the server's close: the body may follow the headers apart
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in answer, answer[:300]
        finally:
            for s in (idle, slow_head, slow_body):
                s.close()
        assert _post(u, {"model": NAME, "input": "served after the slow clients"}).status_code == 200


def _front_door_count(url: str) -> int:
    c = grpcclient.InferenceServerClient(url)
    try:
        stats = c.get_inference_statistics(NAME, as_json=True)["model_stats"][0]
        return int(stats.get("inference_count", 0))
    finally:
        c.close()


def test_health_ready_answers_from_a_recent_probe_not_an_inference_per_call(minilm_repo, minilm_server, tmp_path):
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url, "--route", "frontdoor") as u:
        assert httpx.get(u + "/health/ready").status_code == 200
        before = _front_door_count(minilm_server.grpc_url)
        codes = [httpx.get(u + "/health/ready").status_code for _ in range(100)]
        after = _front_door_count(minilm_server.grpc_url)
    assert codes == [200] * 100
    assert after - before < 20, (before, after)  # one probe per 2 s at most, never one per call


def _metric(url: str, name: str) -> float:
    """A metric's value; a missing metric fails the test (a renamed one must not read as 0)."""
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name}")


def _big(u: str, n: int, corpus, out: dict, key: str, errors: list) -> threading.Thread:
    long = " ".join(corpus[:12])[:1900]  # cut at 256 tokens; 1024 of them stay under the 2,000,000-character cap
    body = {"model": NAME, "input": [f"{i} {long}" for i in range(n)]}

    def run() -> None:
        try:
            r = httpx.post(u + "/v1/embeddings", json=body, timeout=600)
            assert r.status_code == 200 and len(r.json()["data"]) == n, r.text[:300]
            out[key] = time.monotonic()
        except BaseException as exc:  # collected, re-raised by the test
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_large_request_does_not_hold_up_small_ones(minilm_repo, minilm_server, corpus, tmp_path):
    """A large legal request goes up in parts behind small requests: five small requests sent one after
    another while it is in flight are all answered before it is."""
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url, "--route", "frontdoor",
                 "--request-timeout", "600") as u:
        done: dict[str, float] = {}
        errors: list[BaseException] = []
        t = _big(u, 192, corpus, done, "big", errors)   # 6 front-door calls of 32 texts of 256 tokens
        until(lambda: _metric(u, "embtrt_gateway_requests_in_flight") == 1 or errors, 60, "the big request admitted")
        small = []
        for i in range(5):
            r = httpx.post(u + "/v1/embeddings", json={"model": NAME, "input": f"a short query {i}"}, timeout=120)
            assert r.status_code == 200, r.text[:300]
            small.append(time.monotonic())
        t.join(600)
    assert not errors, errors
    assert "big" in done and max(small) < done["big"], (small, done)


def test_over_the_concurrency_cap_is_429_with_retry_after(minilm_repo, minilm_server, corpus, tmp_path):
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url, "--route", "frontdoor",
                 "--max-concurrent-requests", "2", "--request-timeout", "600") as u:
        done: dict[str, float] = {}
        errors: list[BaseException] = []
        threads = [_big(u, 48, corpus, done, f"big{i}", errors) for i in range(2)]
        until(lambda: _metric(u, "embtrt_gateway_requests_in_flight") == 2 or errors, 60, "both large requests in")
        r = httpx.post(u + "/v1/embeddings", json={"model": NAME, "input": "one too many"}, timeout=60)
        in_flight = _metric(u, "embtrt_gateway_requests_in_flight")
        for t in threads:
            t.join(600)
        assert not errors, errors
        err = _envelope(r, 429, "serving its limit of 2 concurrent requests")
        assert err["code"] == "too_many_requests" and r.headers["retry-after"] == "1"
        assert in_flight == 2 and len(done) == 2
        assert _post(u, {"model": NAME, "input": "served once the others are done"}).status_code == 200
