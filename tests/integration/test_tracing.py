"""#72 item 1: a request with a W3C traceparent through the gateway is one trace, received by a real OTLP/HTTP
receiver (tests/otlp_receiver.py, decoding the protobuf export as a collector does): the gateway's span is the
caller's child and its stages (parse, answer: tokenize, coalesce, the upstream call and its try, render) are
its descendants, with the model, dialect, items and tokens; tritonserver, serving in its OpenTelemetry trace
mode (`embtrt serve --otlp-endpoint`'s flags), continues the trace under the gateway's try. Without an
endpoint, no span is made. Real tritonserver and gateway on loopback."""

from __future__ import annotations

import secrets

import pytest

from embtrt.serve.otel import triton_args
from embtrt.serve.server import ServerSpec, TritonServer, free_port
from otlp_receiver import Receiver
from test_gateway import NAME, gateway
from waiting import until

pytestmark = pytest.mark.integration
pytest.importorskip("opentelemetry.sdk")
TEXTS = ["a cat sat on the mat", "stock markets fell sharply today", "the recipe needs two eggs and flour"]


def _one(spans: list[dict], name: str, **where) -> dict:
    got = [s for s in spans if s["name"] == name and all(s[k] == v for k, v in where.items())]
    assert len(got) == 1, (name, where, [(s["name"], s["service"], s["parent"]) for s in spans])
    return got[0]


def test_a_traceparent_through_the_gateway_and_tritonserver_is_one_trace(minilm_repo, tmp_path):
    from openai import OpenAI

    trace_id, caller = secrets.token_hex(16), secrets.token_hex(8)
    with Receiver() as rx:
        srv = TritonServer(ServerSpec(minilm_repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                                      log_file=tmp_path / "tritonserver.log", graceful_exit=False,
                                      extra_args=triton_args(rx.url, 1.0)))
        with srv, gateway(minilm_repo, tmp_path / "gw.log", "--triton", srv.grpc_url, "--route", "ids",
                          "--otlp-endpoint", rx.url) as url:
            client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            got = client.embeddings.create(model=NAME, input=TEXTS, extra_headers={"traceparent": f"00-{trace_id}-{caller}-01"})
            assert len(got.data) == 3
            client.embeddings.create(model=NAME, input=TEXTS[:1])   # no traceparent: a trace of its own
            until(lambda: any(s["service"] == "embtrt-triton" for s in rx.of_trace(trace_id))
                  and any(s["name"] == "render" for s in rx.of_trace(trace_id)), 60, "the gateway's and Triton's spans")
        spans = rx.of_trace(trace_id)
        log = (tmp_path / "gw.log").read_text()
    assert f"traces to {rx.url}" in log, log

    server = _one(spans, "POST /v1/embeddings", parent=caller)
    assert server["service"] == "embtrt-gateway"
    attrs = server["attributes"]
    assert attrs["embtrt.model"] == NAME and attrs["embtrt.dialect"] == "openai" and attrs["embtrt.items"] == 3, attrs
    assert attrs["embtrt.tokens"] == got.usage.prompt_tokens and attrs["http.response.status_code"] == 200, attrs
    parse = _one(spans, "parse", parent=server["span_id"])
    answer = _one(spans, "answer", parent=server["span_id"])
    render = _one(spans, "render", parent=server["span_id"])
    assert parse["end"] <= answer["start"] and answer["end"] <= render["start"]
    _one(spans, "tokenize", parent=answer["span_id"])
    waits = [s for s in spans if s["name"] == "coalesce"]
    calls = [s for s in spans if s["name"] == "upstream call"]
    assert waits and calls and all(w["parent"] == answer["span_id"] for w in waits)
    assert all(c["parent"] == answer["span_id"] and set(c["links"]) <= {w["span_id"] for w in waits} for c in calls)
    tries = [s for s in spans if s["name"] == "triton infer"]
    assert tries and all(t["parent"] in {c["span_id"] for c in calls} for t in tries)
    assert all(t["attributes"]["embtrt.model"].startswith(f"{NAME}_") for t in tries)   # the bucket encoders
    triton = [s for s in spans if s["service"] == "embtrt-triton"]
    assert any(s["parent"] in {t["span_id"] for t in tries} for s in triton), [(s["name"], s["parent"]) for s in triton]
    # the request without a traceparent is a trace of its own, a root
    roots = [s for s in rx.spans if s["name"] == "POST /v1/embeddings" and s["trace_id"] != trace_id]
    assert len(roots) == 1 and roots[0]["parent"] == ""


def test_the_standard_variables_turn_tracing_on_and_otel_sdk_disabled_off(minilm_repo, minilm_server, tmp_path):
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT alone traces (a request with no traceparent: a root span);
    OTEL_SDK_DISABLED=true beside it makes none and says nothing of traces."""
    from openai import OpenAI

    with Receiver() as rx:
        for n, env in enumerate(({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.url},
                                 {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.url, "OTEL_SDK_DISABLED": "true"})):
            log = tmp_path / f"gw{n}.log"
            with gateway(minilm_repo, log, "--triton", minilm_server.grpc_url, env=env) as url:
                OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0).embeddings.create(model=NAME, input=TEXTS)
            # the gateway has stopped (its spans exported on the way out)
            if n == 0:
                assert f"traces to {rx.url}" in log.read_text()
                until(lambda: any(s["name"] == "POST /v1/embeddings" for s in rx.spans), 30, "the request's span")
                before = len(rx.spans)
            else:
                assert "traces to" not in log.read_text()
                assert len(rx.spans) == before


def _chain_in(spans: list[dict]) -> bool:
    """The front door's span is there, each of its ancestors up to the gateway's, and the gateway's render."""
    by_id = {s["span_id"]: s for s in spans}
    door = [s for s in spans if s["name"] == f"frontdoor {NAME}"]
    if not door or not any(s["name"] == "render" for s in spans):
        return False
    up = door[0]
    while up["service"] != "embtrt-gateway":
        if up["parent"] not in by_id:
            return False
        up = by_id[up["parent"]]
    return True


def test_through_the_front_door_the_trace_goes_on_into_its_stages(minilm_repo, tmp_path):
    """The gateway's front-door route: the gateway's try, Triton's spans for the front door's request (its
    OpenTelemetry mode), and under Triton's the front door's own span (embtrt_backend.tracing, the
    endpoint from the variable `embtrt serve --otlp-endpoint` sets) with its stages in the order they ran."""
    from openai import OpenAI

    from embtrt.serve.otel import triton_env

    trace_id, caller = secrets.token_hex(16), secrets.token_hex(8)
    with Receiver() as rx:
        srv = TritonServer(ServerSpec(minilm_repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                                      log_file=tmp_path / "tritonserver.log", graceful_exit=False,
                                      extra_args=triton_args(rx.url, 1.0), env=triton_env(rx.url)))
        with srv, gateway(minilm_repo, tmp_path / "gw.log", "--triton", srv.grpc_url, "--route", "frontdoor",
                          "--otlp-endpoint", rx.url) as url:
            client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            got = client.embeddings.create(model=NAME, input=TEXTS, extra_headers={"traceparent": f"00-{trace_id}-{caller}-01"})
            assert len(got.data) == 3
            # the front door's own span ends after its stages' (it may come in a later export than theirs), and
            # Triton exports its spans on its own schedule: every span of the chain is waited for
            until(lambda: _chain_in(rx.of_trace(trace_id)), 60, "the front door's, Triton's and the gateway's spans")
        spans = rx.of_trace(trace_id)
    by_id = {s["span_id"]: s for s in spans}
    door = _one(spans, f"frontdoor {NAME}")
    assert door["service"] == "embtrt-frontdoor" and door["attributes"]["embtrt.model"] == NAME, door
    assert door["attributes"]["embtrt.execute.requests"] >= 1 and door["attributes"]["embtrt.execute.rows"] >= 1
    # its parent is Triton's, whose ancestors lead to the gateway's try and the caller
    up, seen = by_id[door["parent"]], []
    assert up["service"] == "embtrt-triton", up
    while up["parent"] in by_id:
        seen.append((up["service"], up["name"]))
        up = by_id[up["parent"]]
    seen.append((up["service"], up["name"]))
    assert ("embtrt-gateway", "triton infer") in seen and up["parent"] == caller, seen
    stages = sorted((s for s in spans if s["parent"] == door["span_id"]), key=lambda s: s["start"])
    names = [s["name"] for s in stages]
    assert names[0] == "read" and names[-1] == "respond" and {"parse", "tokenize", "encode", "pool"} <= set(names), names
    assert all(a["end"] <= b["start"] for a, b in zip(stages, stages[1:])), names
    assert door["start"] <= stages[0]["start"] and stages[-1]["end"] <= door["end"]


def test_embtrt_up_with_an_otlp_endpoint_traces_the_gateway_tritonserver_and_the_front_door(minilm_repo, tmp_path):
    """`embtrt up --otlp-endpoint`: one command, the caller's trace through the gateway into tritonserver (up's
    gateway calls MiniLM's bucket encoders: the ids route), a tritonclient gRPC call to the front door with
    its own traceparent gets the front door's stage spans under Triton's, and the log says where traces go."""
    import signal

    from openai import OpenAI

    import tritonclient.grpc as grpcclient
    from test_up import Up

    from embtrt.serve import wire

    trace_id, caller = secrets.token_hex(16), secrets.token_hex(8)
    with Receiver() as rx:
        up = Up(minilm_repo, tmp_path, "--otlp-endpoint", rx.url)
        try:
            client = OpenAI(base_url=f"http://127.0.0.1:{up.port}/v1", api_key="unused", max_retries=0)
            got = client.embeddings.create(model=NAME, input=TEXTS, extra_headers={"traceparent": f"00-{trace_id}-{caller}-01"})
            assert len(got.data) == 3
            grpc_trace = secrets.token_hex(16)
            with grpcclient.InferenceServerClient(f"127.0.0.1:{up.grpc}") as c:
                c.infer(NAME, [wire.text_input(TEXTS)], headers={"traceparent": f"00-{grpc_trace}-{caller}-01"})
            try:
                until(lambda: {"embtrt-gateway", "embtrt-triton"} <= {s["service"] for s in rx.of_trace(trace_id)}
                      and any(s["name"] == f"frontdoor {NAME}" for s in rx.of_trace(grpc_trace)), 60,
                      "the gateway's, Triton's and the front door's spans")
            except AssertionError as exc:   # say what did arrive (an intermittent failure in CI, not yet explained)
                seen = lambda t: sorted({(s["service"], s["name"]) for s in rx.of_trace(t)})   # noqa: E731
                raise AssertionError(f"{exc}; the HTTP call's trace: {seen(trace_id)}; the gRPC call's: {seen(grpc_trace)}; "
                                     f"{len(rx.spans)} spans in all; log: {up.text()[-1500:]}") from None
            assert up.stop(signal.SIGINT) == 0, up.text()[-2000:]
        finally:
            up.kill()
        spans = rx.of_trace(trace_id)
    assert f"traces to {rx.url}" in up.text(), up.text()[-2000:]
    top = _one(spans, "POST /v1/embeddings", parent=caller)
    ids = {s["span_id"] for s in spans}
    assert all(s["parent"] in ids for s in spans if s is not top)   # one tree under the caller's span
    triton = [s for s in spans if s["service"] == "embtrt-triton"]
    assert triton, [(s["service"], s["name"]) for s in spans]
    door = _one(rx.of_trace(grpc_trace), f"frontdoor {NAME}")
    stages = {s["name"] for s in rx.of_trace(grpc_trace) if s["parent"] == door["span_id"]}
    assert stages >= {"read", "tokenize", "encode", "respond"}, stages
