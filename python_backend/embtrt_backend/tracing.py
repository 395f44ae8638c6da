"""The front door's stages as OpenTelemetry spans (#72), under the trace Triton keeps for the request.

Triton in its OpenTelemetry trace mode (`embtrt serve --otlp-endpoint`) traces a request (continuing the
caller's `traceparent`), and the Python backend hands its context to the model: `request.trace().get_context()`
is a W3C carrier as JSON, or None for a request Triton does not trace. For each traced request of an
execute() the front door sends a span `frontdoor <model>` (the child of Triton's span for it) with one child
per stage as the stage timers (embtrt_backend.stages) saw them: read, parse, tokenize, plan, pad, encode,
pool, finish, respond, in the order they ran (a stage run several times, as pad and encode per chunk,
is a span each time). The requests of one execute share its stages: each traced one gets its own copy
with the execute's request and row counts.

On when tritonserver's environment names an OTLP endpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces; `embtrt serve` sets the first) and the stubs' Python has the
OpenTelemetry SDK (`embtrt[tracing]`); otherwise the front door says once why not and makes no span. Off,
nothing is done per request. Plain Python, tested without Triton (a request is anything with trace()).
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time

SERVICE = "embtrt-frontdoor"


ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"


def disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def endpoint() -> str | None:
    """The OTLP/HTTP traces URL from the standard variables (the gateway's and `embtrt serve`'s reading too:
    builder/embtrt/serve/otel.py), None when unset or OTEL_SDK_DISABLED is true."""
    if disabled():
        return None
    if os.environ.get(ENDPOINT_ENV):
        return os.environ[ENDPOINT_ENV]
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return base.rstrip("/") + "/v1/traces" if base else None


class FrontDoorTracer:
    """Spans for the traced requests of each execute(). `exporter`: the span exporter (default: OTLP/HTTP to
    `url`, batched off the request's thread)."""

    def __init__(self, model: str, url: str | None = None, exporter=None) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=url), schedule_delay_millis=500)
        else:
            processor = SimpleSpanProcessor(exporter)
        self.provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("embtrt.frontdoor")
        self.propagator = TraceContextTextMapPropagator()
        self.model = model
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="embtrt-spans", daemon=True)
        self._thread.start()

    def contexts(self, requests) -> list:
        """Each request's trace context (None where Triton does not trace it)."""
        out = []
        for r in requests:
            try:
                carrier = r.trace().get_context()
                out.append(self.propagator.extract(json.loads(carrier)) if carrier else None)
            except Exception:  # noqa: BLE001 (a server without trace contexts, or a carrier unread: no span for it)
                out.append(None)
        return out

    def emit(self, contexts: list, segments: list, start_ns: int, requests: int, rows: int) -> None:
        """Hand one execute's spans to the tracer's thread (made there: a traced execute of 32 requests is
        hundreds of spans, not the request's time to pay)."""
        if any(c is not None for c in contexts) and segments:
            self._queue.put((contexts, list(segments), start_ns, requests, rows, time.time_ns() - time.perf_counter_ns()))

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if job[0] is None:   # flush(): everything before it is made
                job[1].set()
                continue
            try:
                self._spans(*job)
            except Exception as exc:  # noqa: BLE001 (tracing never fails serving: said, and the next goes on)
                print(f"embtrt front door {self.model}: spans not made: {type(exc).__name__}: {exc}", flush=True)

    def flush(self) -> None:
        """Every span handed over so far made and exported (tests; the model's finalize)."""
        done = threading.Event()
        self._queue.put((None, done))
        done.wait(10)
        self.provider.force_flush()

    def _spans(self, contexts: list, segments: list, start_ns: int, requests: int, rows: int, wall: int) -> None:
        """The spans of one execute for each traced request: `segments` (stage, start, end) in perf_counter
        ns, `start_ns` the execute's start on the same clock, `wall` that clock's offset to epoch ns."""
        end_ns = segments[-1][2]
        attrs = {"embtrt.model": self.model, "embtrt.execute.requests": requests, "embtrt.execute.rows": rows}
        for ctx in contexts:
            if ctx is None:
                continue
            top = self.tracer.start_span(f"frontdoor {self.model}", context=ctx, start_time=start_ns + wall,
                                         attributes=attrs)
            from opentelemetry.trace import set_span_in_context

            inner = set_span_in_context(top)
            for stage, t0, t1 in segments:
                self.tracer.start_span(stage, context=inner, start_time=t0 + wall).end(end_time=t1 + wall)
            top.end(end_time=end_ns + wall)

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(5)
        self.provider.shutdown()


def tracer_for(model: str, log=print) -> FrontDoorTracer | None:
    """The front door's tracer where an endpoint is set and the SDK is there; None (said once) otherwise."""
    url = endpoint()
    if url is None:
        return None
    try:
        return FrontDoorTracer(model, url)
    except ImportError as exc:
        log(f"embtrt front door {model}: no stage spans ({exc}): pip install 'embtrt[tracing]' in the server's Python")
        return None
