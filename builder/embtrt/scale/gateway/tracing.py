"""OpenTelemetry traces of the gateway's requests (#72 item 1), off unless an OTLP endpoint is given.

With `--otlp-endpoint URL` (or the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT;
OTEL_SDK_DISABLED=true turns it off) each request is a span, the child of the caller's W3C `traceparent` when it
sends one, with the gateway's stages as its children:

    POST /v1/embeddings          (server; route, dialect, model, items, tokens, status)
      parse                      (the body in its dialect)
      answer                     (the kind's operation)
        tokenize                 (texts to ids in the gateway: the ids route)
        coalesce                 (a request's rows waiting to go upstream with other requests')
        upstream call            (one coalesced call: the first request's child, linked to the others')
          triton infer           (client; one try on one replica, its context sent to Triton as `traceparent`)
      render                     (the answer serialized)

tritonserver continues the trace where it runs with OpenTelemetry tracing (`embtrt serve --otlp-endpoint`:
Triton's `--trace-config mode=opentelemetry`, which takes the context from the gRPC request's headers).
Sampling: parent-based (a caller's sampled trace is traced), else `--trace-sample` (OTEL_TRACES_SAMPLER_ARG),
1.0 by default. Exported in batches over OTLP/HTTP (protobuf) by opentelemetry-sdk (`pip install
'embtrt[tracing]'`).

While off, TRACER is None: every hook here is one test of it (or one ContextVar read), nothing is imported.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Any

from ...errors import SpecError
from ...serve.otel import endpoint_from_env, sample_from_env

TRACER: Any = None          # an opentelemetry Tracer while tracing is on
_PROVIDER: Any = None
_NULL = contextlib.nullcontext()
_COUNTS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("embtrt_trace_counts", default=None)


def configure(endpoint: str | None, sample: float | None = None, service: str = "embtrt-gateway") -> str | None:
    """Tracing on, exporting to the endpoint (endpoint_from_env); the endpoint, or None when off."""
    global TRACER, _PROVIDER
    url = endpoint_from_env(endpoint)
    if url is None:
        return None
    rate = sample_from_env(sample)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError:
        raise SpecError(f"tracing to {url} needs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http",
                        "pip install 'embtrt[tracing]'") from None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service)})
    _PROVIDER = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(rate)))
    _PROVIDER.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    TRACER = _PROVIDER.get_tracer("embtrt.gateway")
    return url


def shutdown() -> None:
    """Export what is left and stop (the gateway's exit)."""
    global TRACER, _PROVIDER
    if _PROVIDER is not None:
        _PROVIDER.shutdown()
    TRACER = _PROVIDER = None


def request(scope: dict, name: str, attributes: dict):
    """The server span of one HTTP request, the child of its `traceparent` when it has one (a context
    manager yielding the span); counts of items and tokens gathered for it (count)."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()
               if k in (b"traceparent", b"tracestate")}
    parent = TraceContextTextMapPropagator().extract(carrier) if carrier else None
    _COUNTS.set([0, 0])
    return TRACER.start_as_current_span(name, context=parent, kind=trace.SpanKind.SERVER, attributes=attributes)


def finish(span, status: int) -> None:
    """The request's figures and status on its span."""
    from opentelemetry.trace import Status, StatusCode

    counts = _COUNTS.get()
    if counts is not None:
        span.set_attribute("embtrt.items", counts[0])
        span.set_attribute("embtrt.tokens", counts[1])
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))


def span(name: str, attributes: dict | None = None):
    """A child span of the current one while tracing, else a context manager that does nothing."""
    if TRACER is None:
        return _NULL
    return TRACER.start_as_current_span(name, attributes=attributes)


def annotate(**attributes: Any) -> None:
    """Attributes (embtrt.<name>) on the current span, while tracing."""
    if TRACER is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes({f"embtrt.{k}": v for k, v in attributes.items() if v is not None})


def count(items: int, tokens: int) -> None:
    """Items and tokens a request sent upstream (Metrics.count), added up on its server span."""
    counts = _COUNTS.get()
    if counts is not None:
        counts[0] += items
        counts[1] += tokens


def waiting(rows: int, pool: str) -> tuple | None:
    """A request's rows entering the coalescer: (its current context, its `coalesce` span), None while off."""
    if TRACER is None:
        return None
    from opentelemetry import context

    return context.get_current(), TRACER.start_span("coalesce", attributes={"embtrt.rows": rows, "embtrt.pool": pool})


def coalesced(parts: list, attributes: dict):
    """The span of one upstream call carrying the rows of `parts` (their `waiting` records): the first
    request's child, linked to every request's coalesce span."""
    if TRACER is None or parts[0] is None:
        return _NULL
    from opentelemetry.trace import Link

    links = [Link(p[1].get_span_context()) for p in parts if p is not None]
    return TRACER.start_as_current_span("upstream call", context=parts[0][0], links=links, attributes=attributes)


def client(model: str, url: str, pool: str):
    """The span of one try of an upstream call (a context manager yielding the gRPC headers that carry its
    context to Triton, None while off)."""
    if TRACER is None:
        return _NULL
    return _client(model, url, pool)


@contextlib.contextmanager
def _client(model: str, url: str, pool: str):
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    with TRACER.start_as_current_span("triton infer", kind=trace.SpanKind.CLIENT,
                                      attributes={"embtrt.model": model, "server.address": url, "embtrt.pool": pool}):
        headers: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(headers)
        yield headers
