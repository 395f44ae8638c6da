"""The load generator of the request-path benchmarks (embtrt.measure.loadgen) against real tritonservers:
what it times is what came back (vectors equal to SentenceTransformer.encode, request options carried on
both protocols), several processes share the load, failures are counted, and the floor model
(embtrt.measure.floor) answers with the front door's signature."""

import numpy as np
import pytest

from embtrt.measure.floor import FLOOR_MODEL, write_floor
from embtrt.measure.loadgen import Job, run

from conftest import start_server


@pytest.fixture(scope="module")
def floor_server(tmp_path_factory):
    base = tmp_path_factory.mktemp("floor")
    with start_server(write_floor(base / "repo", dim=24, max_batch_size=16), base) as srv:
        yield srv


@pytest.fixture(scope="module")
def minilm_reference(minilm_path, corpus):
    from sentence_transformers import SentenceTransformer

    texts = corpus[:40]
    st = SentenceTransformer(str(minilm_path), device="cpu")
    return texts, st.encode(texts), st.encode(texts, truncate_dim=64, normalize_embeddings=True)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_timed_vectors_are_the_references_from_several_processes(minilm_server, minilm_reference, protocol):
    texts, full, _ = minilm_reference
    payloads = tuple((t,) for t in texts) + tuple(tuple(texts[i:i + 4]) for i in range(0, 8, 4))
    url = minilm_server.grpc_url if protocol == "grpc" else minilm_server.http_url
    out = run(Job(url, "all_minilm_l6_v2", payloads, len(payloads), concurrency=4, processes=2, protocol=protocol,
                  warmup=4, keep=True))
    assert out.errors == 0 and len(out.latencies_s) == len(payloads) and out.processes == 2
    assert sorted(out.outputs) == list(range(len(payloads)))
    for i, p in enumerate(payloads):
        want = full[[texts.index(t) for t in p]]
        got = out.outputs[i]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert out.wall_s > 0 and out.req_per_s > 0 and out.client_cpu_s > 0 and 0 < out.client_busy


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_request_options_travel_with_every_request(minilm_server, minilm_reference, protocol):
    texts, _, narrow = minilm_reference
    url = minilm_server.grpc_url if protocol == "grpc" else minilm_server.http_url
    out = run(Job(url, "all_minilm_l6_v2", tuple((t,) for t in texts[:6]), 6, concurrency=2, protocol=protocol,
                  parameters=(("dimensions", 64),), keep=True))
    got = np.concatenate([out.outputs[i] for i in range(6)])
    assert got.shape == (6, 64)
    np.testing.assert_allclose(got, narrow[:6], atol=1e-5)


def test_failed_requests_are_counted_with_their_message(minilm_server):
    out = run(Job(minilm_server.grpc_url, "all_minilm_l6_v2", (("text",),), 3, concurrency=1,
                  parameters=(("dimension", 10),)))   # a misspelt option: refused by the front door
    assert out.errors == 3 and not out.latencies_s
    assert "unknown request parameter 'dimension'" in out.error_samples[0]


def test_a_generator_that_cannot_start_says_why(minilm_server):
    with pytest.raises(RuntimeError, match="generator process 0"):
        run(Job(minilm_server.grpc_url, "no_such_model", (("text",),), 2, warmup=1))


def test_the_floor_answers_zeros_of_its_width_for_every_row(floor_server):
    payloads = (("a",), ("b", "c", "d"))
    out = run(Job(floor_server.grpc_url, FLOOR_MODEL, payloads, 20, concurrency=8, keep=True))
    assert out.errors == 0 and len(out.outputs) == 20
    for i, v in out.outputs.items():
        assert v.shape == (len(payloads[i % 2]), 24) and not v.any()


def test_rounds_come_from_the_same_warm_processes(minilm_server):
    from embtrt.measure.loadgen import run_rounds

    outs = run_rounds(Job(minilm_server.http_url, "all_minilm_l6_v2", (("one",), ("two",)), 10, concurrency=2,
                          processes=2, protocol="http", warmup=2, keep=True), 3)
    assert len(outs) == 3 and all(o.errors == 0 and len(o.latencies_s) == 10 and len(o.outputs) == 10 for o in outs)
    np.testing.assert_allclose(outs[0].outputs[0], outs[2].outputs[0], atol=1e-6)   # the same requests each round
    assert not np.allclose(outs[0].outputs[0], outs[0].outputs[1])                 # told apart


def test_work_is_shared_by_workers_not_processes_and_warm_up_is_exact(minilm_server):
    """6 workers in 4 processes (2, 2, 1, 1): each worker gets a sixth of the requests (a process of one worker
    does not finish last at a lower concurrency), and the warm-up is the job's, not rounded up per worker."""
    import tritonclient.grpc as g

    c = g.InferenceServerClient(minilm_server.grpc_url)
    before = int(c.get_inference_statistics("all_minilm_l6_v2").model_stats[0].inference_stats.success.count)
    out = run(Job(minilm_server.grpc_url, "all_minilm_l6_v2", (("a",), ("b",), ("c",)), 30, concurrency=6, processes=4,
                  warmup=7, keep=True))
    after = int(c.get_inference_statistics("all_minilm_l6_v2").model_stats[0].inference_stats.success.count)
    c.close()
    assert out.processes == 4 and out.warmup_sent == 7 and len(out.latencies_s) == 30 and sorted(out.indices) == list(range(30))
    assert after - before == 37


def test_a_dead_http_connection_is_made_again(minilm_server):
    """A server that closes the keep-alive connection after each answer: every request still answered."""
    import socket
    import threading

    from embtrt.serve.server import free_port

    port = free_port()
    srv = socket.create_server(("127.0.0.1", port))
    stop = threading.Event()

    def proxy():   # answers each request on a connection, then closes it
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                data = conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                n = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
                while len(body) < n:
                    body += conn.recv(65536)
                import http.client

                up = http.client.HTTPConnection("127.0.0.1", int(minilm_server.http_url.rsplit(":", 1)[1]))
                up.request("POST", head.split(b" ")[1].decode(), body, {"Content-Type": "application/json"})
                r = up.getresponse()
                payload = r.read()
                extra = "".join(f"{k}: {v}\r\n" for k, v in r.getheaders() if k.lower() == "inference-header-content-length")
                conn.sendall(f"HTTP/1.1 {r.status} OK\r\nContent-Length: {len(payload)}\r\n{extra}Connection: close\r\n\r\n"
                             .encode() + payload)

    t = threading.Thread(target=proxy, daemon=True)
    t.start()
    try:
        out = run(Job(f"http://127.0.0.1:{port}", "all_minilm_l6_v2", (("x",), ("y",)), 6, protocol="http", keep=True))
    finally:
        stop.set()
        t.join(timeout=5)
        srv.close()
    assert out.errors == 0 and len(out.outputs) == 6 and out.outputs[0].shape == (1, 384)
