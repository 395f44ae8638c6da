"""Where traces go (serve/otel.py): the flag, else the standard OTEL_* variables in their order, OTEL_SDK_DISABLED
over all; the sample rate checked; tritonserver's OpenTelemetry flags, with its one-in-N rate."""

import pytest

from embtrt.errors import SpecError
from embtrt.serve.otel import endpoint_from_env, sample_from_env, triton_args

VARS = ("OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER_ARG")


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for v in VARS:
        monkeypatch.delenv(v, raising=False)


def test_the_flag_then_the_traces_variable_then_the_base_one(monkeypatch):
    assert endpoint_from_env(None) is None and triton_args(None, None) == ()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert endpoint_from_env(None) == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4318/v1/traces")
    assert endpoint_from_env(None) == "http://traces:4318/v1/traces"
    assert endpoint_from_env("http://flag:4318/v1/traces") == "http://flag:4318/v1/traces"
    monkeypatch.setenv("OTEL_SDK_DISABLED", "TRUE")
    assert endpoint_from_env("http://flag:4318/v1/traces") is None and triton_args("http://flag:4318/v1/traces", 1.0) == ()


def test_the_sample_rate_and_tritons_flags(monkeypatch):
    assert sample_from_env(None) == 1.0
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    assert sample_from_env(None) == 0.25 and sample_from_env(0.5) == 0.5
    with pytest.raises(SpecError, match="invalid trace sample rate 1.5"):
        sample_from_env(1.5)
    args = triton_args("http://c:4318/v1/traces", None)
    assert "--trace-config=mode=opentelemetry" in args and "--trace-config=rate=4" in args   # one in 4 requests
    assert "--trace-config=opentelemetry,url=http://c:4318/v1/traces" in args
    assert "--trace-config=rate=1" in triton_args("http://c:4318/v1/traces", 1.0)
