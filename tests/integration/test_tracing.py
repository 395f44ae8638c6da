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
