"""`embtrt up`: model folders or repositories in, one HTTP endpoint out (embtrt/up.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .app import app, say


@app.command()
def up(
    source: list[Path] = typer.Argument(..., help="A Hugging Face / sentence-transformers model folder (built, or its earlier build reused), or a repository written by embtrt build; several serve several models behind one endpoint."),
    host: str = typer.Option("127.0.0.1", help="Address to bind the HTTP and gRPC ports. Default 127.0.0.1 (loopback only); 0.0.0.0 exposes them."),
    port: int = typer.Option(8080, help="The HTTP port users call (OpenAI, TEI, Cohere, vLLM, NIM and infinity routes). Default 8080; 0 picks a free one (the ready line names it)."),
    grpc_port: int = typer.Option(8001, help="tritonserver's gRPC port, for tritonclient and embtrt embed. Default 8001; 0 picks a free one."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to build a model folder's repository (one folder only). Default: $EMBTRT_CACHE/repos, else ~/.cache/embtrt/repos, one per folder, weights hash and target."),
    target: str = typer.Option("auto", help="Target of a build: python-ort, python-openvino or python-torch (TensorRT: embtrt build, embtrt engines, then embtrt up REPOSITORY). Default auto: python-ort, or the model's kind's own target where it builds for others only (a page-image retriever: python-torch)."),
    rebuild: bool = typer.Option(False, help="Build again even when a repository built from the same weights and target exists. Default off."),
    api_key_env: Optional[str] = typer.Option(None, help="Name of an environment variable holding the API key; requests must send Authorization: Bearer <key>. Default: no key."),
    drain_grace: float = typer.Option(5.0, help="On SIGTERM, seconds tritonserver keeps serving as usual after the gateway stopped taking connections; Ctrl-C skips it. Default 5."),
    served_model_name: Optional[list[str]] = typer.Option(None, help="The name clients call the model by over HTTP, in place of its own: NAME for the only model, MODEL=NAME for one of several; repeat for aliases (the first is reported). Default: each model's own name (its folder's)."),
    otlp_endpoint: Optional[str] = typer.Option(None, help="OTLP/HTTP traces endpoint of an OpenTelemetry collector, e.g. http://localhost:4318/v1/traces: one trace per request from the gateway through tritonserver into the front door's stages (docs/observability.md; pip install 'embtrt[tracing]'). Default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing."),
    trace_sample: Optional[float] = typer.Option(None, help="Fraction of requests traced (those with a sampled traceparent always are at the gateway). Default: OTEL_TRACES_SAMPLER_ARG, else 1.0."),
) -> None:
    """One command from a model folder to an HTTP endpoint: build (or reuse the build), serve, and the gateway in front; Ctrl-C stops all of it."""
    from ..up import UpSpec
    from ..up import up as run_up

    from ..scale.gateway.config import api_key_from

    run_up(UpSpec(list(source), host=host, port=port, grpc_port=grpc_port, out=out, target=target, rebuild=rebuild,
                  api_key=api_key_from(api_key_env), drain_grace_s=drain_grace, served_model_names=tuple(served_model_name or ()),
                  otlp_endpoint=otlp_endpoint, trace_sample=trace_sample), log=say)
