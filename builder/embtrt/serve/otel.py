"""Where OpenTelemetry traces go: the OTLP endpoint and sample rate from a flag or the standard OTEL_*
variables, for the gateway (scale/gateway/tracing.py) and for tritonserver (`embtrt serve --otlp-endpoint`:
Triton's own OpenTelemetry trace mode, which continues the context a request's `traceparent` header carries)."""

from __future__ import annotations

import os

from embtrt_backend.tracing import ENDPOINT_ENV, disabled, endpoint

from ..errors import SpecError

__all__ = ["ENDPOINT_ENV", "endpoint_from_env", "sample_from_env", "trace_config", "triton_args", "triton_env"]


def endpoint_from_env(given: str | None) -> str | None:
    """The OTLP/HTTP traces endpoint: `given`, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
    OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces (the front door's reading, embtrt_backend.tracing); None when none
    is set or OTEL_SDK_DISABLED is true."""
    if disabled():
        return None
    return given or endpoint()


def sample_from_env(given: float | None) -> float:
    value = given if given is not None else float(os.environ.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
    if not 0.0 <= value <= 1.0:
        raise SpecError(f"invalid trace sample rate {value}", "a fraction of requests from 0 to 1, e.g. 0.1")
    return value


def triton_env(endpoint: str | None) -> tuple[tuple[str, str], ...]:
    """tritonserver's environment for the same endpoint: its front doors' stage spans go there
    (python_backend/embtrt_backend/tracing.py reads the standard variable)."""
    url = endpoint_from_env(endpoint)
    return () if url is None else ((ENDPOINT_ENV, url),)


def triton_args(endpoint: str | None, sample: float | None, service: str = "embtrt-triton") -> tuple[str, ...]:
    """tritonserver's flags for OpenTelemetry tracing to the same endpoint (embtrt serve, embtrt up): every
    request traced at the given rate, Triton's timestamps as span events, the context from the request's headers."""
    url = endpoint_from_env(endpoint)
    return () if url is None else trace_config(url, sample_from_env(sample), service)


def trace_config(url: str, rate: float, service: str = "embtrt-triton") -> tuple[str, ...]:
    """The flags for `url` at `rate`, read from nothing else (embtrt k8s renders them for other machines)."""
    # Triton's rate is "one in N" requests
    every = max(1, round(1 / rate)) if rate > 0 else 2**31 - 1
    return ("--trace-config=mode=opentelemetry", f"--trace-config=rate={every}", "--trace-config=level=TIMESTAMPS",
            "--trace-config=count=-1", f"--trace-config=opentelemetry,url={url}",
            f"--trace-config=opentelemetry,resource=service.name={service}")
