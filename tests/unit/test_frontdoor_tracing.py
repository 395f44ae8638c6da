"""#72: the front door's stages as spans (python_backend/embtrt_backend/tracing.py), without Triton: requests
whose trace() gives a W3C carrier as JSON (as the Python backend's does for a request Triton traces), the
stage timers recording their marks, an in-memory exporter. The served case (Triton's spans and these in one
trace) is tests/integration/test_tracing.py."""

from __future__ import annotations

import json
import secrets

import pytest

from embtrt_backend.stages import StageClock
from embtrt_backend.tracing import FrontDoorTracer, endpoint, tracer_for

pytest.importorskip("opentelemetry.sdk")


class _Trace:
    def __init__(self, carrier):
        self.carrier = carrier

    def get_context(self):
        return None if self.carrier is None else json.dumps(self.carrier)


class _Request:
    def __init__(self, carrier):
        self._trace = _Trace(carrier)

    def trace(self):
        return self._trace


def _exporter():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return InMemorySpanExporter()


def _execute(clock: StageClock, stages: list[str]) -> None:
    clock.start()
    for s in stages:
        sum(range(2000))   # a little time in each
        clock.mark(s)


def test_each_traced_request_gets_the_executes_stages_as_children_of_its_own_context():
    exporter = _exporter()
    tracer = FrontDoorTracer("minilm", exporter=exporter)
    traces = [secrets.token_hex(16) for _ in range(2)]
    parents = [secrets.token_hex(8) for _ in range(2)]
    requests = [_Request({"traceparent": f"00-{traces[0]}-{parents[0]}-01"}), _Request(None),
                _Request({"traceparent": f"00-{traces[1]}-{parents[1]}-01"})]
    clock = StageClock(record=True)
    stages = ["read", "parse", "tokenize", "plan", "pad", "encode", "pad", "encode", "pool", "finish", "respond"]
    _execute(clock, stages)
    clock.add_rows(5)
    start, segments, rows = clock.recorded()
    assert [s for s, _, _ in segments] == stages and rows == 5
    tracer.emit(tracer.contexts(requests), segments, start, len(requests), rows)
    tracer.flush()   # made on the tracer's thread

    spans = exporter.get_finished_spans()
    assert len(spans) == 2 * (1 + len(stages))   # the untraced request has none
    for trace, parent in zip(traces, parents, strict=True):
        mine = [s for s in spans if f"{s.context.trace_id:032x}" == trace]
        (top,) = [s for s in mine if s.name == "frontdoor minilm"]
        assert f"{top.parent.span_id:016x}" == parent
        assert dict(top.attributes) == {"embtrt.model": "minilm", "embtrt.execute.requests": 3, "embtrt.execute.rows": 5}
        kids = sorted((s for s in mine if s is not top), key=lambda s: s.start_time)
        assert [k.name for k in kids] == stages
        assert all(k.parent.span_id == top.context.span_id for k in kids)
        assert top.start_time <= kids[0].start_time and kids[-1].end_time == top.end_time
        assert all(a.end_time <= b.start_time for a, b in zip(kids, kids[1:]))   # in the order they ran
    assert all(s.resource.attributes["service.name"] == "embtrt-frontdoor" for s in spans)


def test_an_execute_with_no_traced_request_makes_no_span_and_a_clock_without_record_keeps_no_marks():
    exporter = _exporter()
    tracer = FrontDoorTracer("m", exporter=exporter)
    clock = StageClock(record=True)
    _execute(clock, ["read", "respond"])
    start, segments, _ = clock.recorded()
    tracer.emit(tracer.contexts([_Request(None), _Request(None)]), segments, start, 2, 0)
    tracer.flush()
    assert exporter.get_finished_spans() == ()
    bad = _Request(None)
    bad._trace.get_context = lambda: "{not json"   # an unreadable carrier: that request untraced, nothing raised
    assert tracer.contexts([bad]) == [None]
    plain = StageClock()
    _execute(plain, ["read", "respond"])
    assert plain.recorded()[1] == [] and plain.ns["read"] > 0


def test_the_endpoint_comes_from_the_standard_variables_and_none_means_no_tracer(monkeypatch):
    for k in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(k, raising=False)
    assert endpoint() is None and tracer_for("m") is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert endpoint() == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://other:4318/v1/traces")
    assert endpoint() == "http://other:4318/v1/traces"
    t = tracer_for("m")
    assert isinstance(t, FrontDoorTracer)
    t.close()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert endpoint() is None and tracer_for("m") is None
