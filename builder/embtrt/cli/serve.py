"""Serving: `embtrt serve` (serve/supervise.py), `embed` (serve/client.py), `probe` (serve/probe.py),
and `demo`, the main job end to end on the bundled model."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from ..errors import require_extra
from .app import app, say


@app.command()
def serve(
    repo: list[Path] = typer.Argument(..., help="Model repository written by embtrt build; several serve several models from one tritonserver (names must differ, bundles for the same Python)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind. Default 127.0.0.1 (loopback only); 0.0.0.0 exposes it."),
    grpc_port: int = typer.Option(8001, help="gRPC port. Default 8001; 0 picks a free one."),
    http_port: int = typer.Option(8000, help="HTTP port. Default 8000; 0 picks a free one."),
    metrics_port: int = typer.Option(8002, help="Prometheus metrics port. Default 8002; 0 picks a free one."),
    health_port: int = typer.Option(8003, help="embtrt serve's own health endpoint on --host: GET /ready (200 while its tritonserver is up and the last probe passed; 503 while starting, recovering, and from SIGTERM on, before the drain) and GET /live; no inference per call. Default 8003; 0 picks a free one; -1 turns it off."),
    tritonserver: Optional[Path] = typer.Option(None, help="tritonserver binary. Default: the nvidia-pytriton wheel's, else PATH."),
    backend_directory: Optional[Path] = typer.Option(None, help="--backend-directory for tritonserver. Default: prepared for the wheel's server."),
    probe_interval: float = typer.Option(5.0, help="Seconds between inference probes (readiness: a probe that fails while the server is busy never restarts it); 0 disables them. Liveness (the server process and every Python stub, no inference) is checked every second regardless. Default 5."),
    probe_timeout: float = typer.Option(10.0, help="Seconds an inference probe may take. Default 10."),
    drain_grace: float = typer.Option(5.0, help="On SIGTERM, seconds to keep serving as usual while balancers take the server out (its /ready is 503 from SIGTERM on); then new requests are refused with UNAVAILABLE, which clients retry on another replica. Ctrl-C (SIGINT) skips it. Default 5."),
    drain_timeout: float = typer.Option(10.0, help="After the grace period, seconds to wait for in-flight requests to finish before tritonserver's own shutdown takes over; when they finish sooner, it is stopped at once. Default 10."),
    startup_timeout: float = typer.Option(300.0, help="Seconds to wait for every model to be ready. Default 300."),
    failures_to_recover: int = typer.Option(2, help="Consecutive failed probes of an idle server before tritonserver is restarted. Default 2."),
    log_file: Optional[Path] = typer.Option(None, help="tritonserver's log, appended to across restarts (moved to FILE.1 past 64 MiB). Default: a new embtrt-tritonserver-*.log in the temporary folder per start; serve prints its path."),
    python_env: Optional[Path] = typer.Option(None, help="Run the Python-backend stubs with this environment's python3 (a venv or prefix) and none of embtrt's packages, as a stock tritonserver image does. Default: embtrt's own environment."),
    otlp_endpoint: Optional[str] = typer.Option(None, help="OTLP/HTTP traces endpoint of an OpenTelemetry collector, e.g. http://otel-collector:4318/v1/traces: tritonserver traces its requests in its OpenTelemetry mode, continuing a request's traceparent (the gateway's), and the front doors add their stages as spans (docs/observability.md). Default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing."),
    trace_sample: Optional[float] = typer.Option(None, help="Fraction of requests tritonserver traces (one in round(1/fraction)). Default: OTEL_TRACES_SAMPLER_ARG, else 1.0."),
) -> None:
    """Serve a repository with tritonserver; restart it when it dies (process, stub) or stops answering while idle; stop on Ctrl-C/SIGTERM."""
    from ..serve.otel import triton_args, triton_env
    from ..serve.ports import refuse_taken, reserve
    from ..serve.server import ServerSpec, free_port
    from ..serve.supervise import Supervisor

    # every taken port named at once, before anything starts
    refuse_taken(host, {"--grpc-port": grpc_port, "--http-port": http_port, "--metrics-port": metrics_port,
                        **({"--health-port": health_port} if health_port > 0 else {})})
    reserve(grpc_port, http_port, metrics_port, max(health_port, 0))   # a 0 among them never picks another's port
    spec = ServerSpec(repository=repo[0], more_repositories=tuple(repo[1:]), host=host,
                      grpc_port=grpc_port or free_port(host), http_port=http_port or free_port(host),
                      metrics_port=metrics_port or free_port(host), tritonserver=tritonserver,
                      backend_directory=backend_directory, startup_timeout_s=startup_timeout, python_env=python_env,
                      drain_s=drain_timeout, log_file=log_file, extra_args=triton_args(otlp_endpoint, trace_sample), env=triton_env(otlp_endpoint))
    Supervisor(spec, probe_interval_s=probe_interval, failures_to_recover=failures_to_recover, log=say,
               probe_timeout_s=probe_timeout, health_port=None if health_port < 0 else health_port,
               drain_grace_s=drain_grace).run()


@app.command()
def embed(
    texts: Optional[list[str]] = typer.Argument(None, help="Texts to embed."),
    image: Optional[list[Path]] = typer.Option(None, "--image", help="An image file to embed (repeat for several; a text-and-image model: docs/images.md). Default none."),
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address. Default 127.0.0.1:8001."),
    model: Optional[str] = typer.Option(None, help="Model to call (the front door). Default: the one embtrt model the server serves (several: name one)."),
    prompt_name: Optional[str] = typer.Option(None, help="Request option: one of the model's prompts (embtrt.json lists them). Default: the model's default prompt."),
    input_type: Optional[str] = typer.Option(None, help="Request option: query | passage | document, mapped onto the model's prompts. Default: none."),
    dimensions: Optional[int] = typer.Option(None, help="Request option: Matryoshka width (the first D components, renormalized when the model normalizes). Default: the full width."),
    truncate: Optional[str] = typer.Option(None, help="Request option: END (keep the start) | START (keep the end) | NONE (an over-long text is an error). Default: the build's --overflow."),
    embedding_type: Optional[str] = typer.Option(None, help="Request option: float | int8 | uint8 | binary | ubinary (sentence-transformers' quantize_embeddings). Default float."),
    as_json: bool = typer.Option(False, "--json", help="Print {identity, latency_ms, embeddings} as JSON. Default off."),
) -> None:
    """Embed texts (and, with a text-and-image model, images) over gRPC and print the vectors with the latency."""
    import numpy as np
    from embtrt_backend.kinds import POOLED, kind_of

    from ..common.plugins import implementation
    from ..errors import ClientError
    from ..serve.client import EmbeddingClient, model_kind, resolve_model

    texts, images = list(texts or []), list(image or [])
    if not texts and not images:
        raise ClientError("nothing to embed", "give texts, or --image FILE for a text-and-image model")
    model = resolve_model(url, model)
    kind = kind_of(model_kind(url, model))
    if kind.image_input and kind.has(POOLED):   # a model that takes images and pools: its own client embeds both
        if input_type is not None:
            raise ClientError("--input-type does not apply to a text-and-image model", "use --prompt-name")
        with implementation(kind, "client")(url, model) as ic:
            identity = {k: v for k, v in ic.parameters().items() if k.startswith("embtrt.")}
            t0 = time.perf_counter()
            parts = ([ic.embed(texts, prompt_name=prompt_name, dimensions=dimensions, truncate=truncate,
                               embedding_type=embedding_type)] if texts else []) + \
                    ([ic.embed_images(images, dimensions=dimensions, embedding_type=embedding_type)] if images else [])
            ms = (time.perf_counter() - t0) * 1e3
        _print_vectors(model, identity, ms, texts + [f"image {p}" for p in images], np.concatenate(parts), as_json)
        return
    if images and kind.image_input:   # it takes images, and pools none (a page-image retriever: token vectors)
        raise ClientError(f"model {model!r} is {kind.label}: it gives token vectors, not one vector per image",
                          kind.client_hint)
    if images:
        raise ClientError(f"model {model!r} is {kind.label} of texts: it takes no images",
                          "point --model at a text-and-image model (docs/images.md)")
    with EmbeddingClient(url, model) as c:
        meta = c.metadata()
        t0 = time.perf_counter()
        vecs = c.embed(texts, prompt_name=prompt_name, input_type=input_type, dimensions=dimensions,
                       truncate=truncate, embedding_type=embedding_type)
        ms = (time.perf_counter() - t0) * 1e3
    _print_vectors(model, meta.identity, ms, texts, vecs, as_json)


def _print_vectors(model: str, identity: dict, ms: float, labels: list[str], vecs, as_json: bool) -> None:
    """The vectors of `labels` (texts, or "image PATH"): JSON, or a line each."""
    if as_json:
        sys.stdout.write(json.dumps({"model": model, "identity": identity, "latency_ms": ms,
                                     "embeddings": vecs.tolist()}) + "\n")
        return
    noun = "texts" if not any(t.startswith("image ") for t in labels) else "inputs"
    say(f"{model} ({identity.get('embtrt.backend_profile', '?')}), dim {vecs.shape[1]}, {len(labels)} {noun} in {ms:.1f} ms")
    for t, v in zip(labels, vecs):
        if v.dtype.kind == "f":
            head = ", ".join(f"{x:+.4f}" for x in v[:6])
            say(f"  |v|={float((v ** 2).sum() ** 0.5):.4f} [{head}, ...]  {t[:60]!r}")
        else:
            say(f"  {v.dtype} x{v.size} [{', '.join(str(int(x)) for x in v[:8])}, ...]  {t[:60]!r}")


@app.command()
def probe(
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address. Default 127.0.0.1:8001."),
    model: Optional[list[str]] = typer.Option(None, help="Model to probe; repeat for several. A model and its NAME_<L> ensembles must agree; different models (several repositories on one server) are probed each on its own. Default: every embtrt model the server serves."),
    expand: bool = typer.Option(True, "--expand/--no-expand", help="Also probe each NAME_<L> bucket ensemble of the first model. --no-expand probes only the --model names (a length pool's own ensembles). Default on."),
    timeout: float = typer.Option(10.0, help="Seconds per request. Default 10."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON. Default off."),
) -> None:
    """Liveness by real inference through the front door and every bucket; exit 1 when any fails."""
    from ..serve.client import served_models
    from ..serve.probe import probe_models

    r = probe_models(url, model or served_models(url, timeout) or ["(none served)"], timeout, expand=expand)
    if as_json:
        sys.stdout.write(json.dumps({"ok": r.ok, "latency_ms": r.latency_ms, "errors": r.errors, "checked": r.checked}) + "\n")
    else:
        say(r.summary())
    raise typer.Exit(0 if r.ok else 1)


@app.command()
def demo(
    out_dir: Path = typer.Option(Path("repo"), "--out", help="Repository folder. Default ./repo (built when missing)."),
    rebuild: bool = typer.Option(False, help="Rebuild even when --out holds a repository. Default off."),
) -> None:
    """The main job on the bundled model: build, serve on free loopback ports, embed texts over gRPC, stop."""
    require_extra("build", "demo", "torch", "transformers", "sentence_transformers", "onnx", "onnxruntime")
    from ..export import build as run_build
    from ..export.spec_options import spec_from_options
    from ..repository.manifest import has_manifest, read_manifest
    from ..serve.client import EmbeddingClient
    from ..serve.server import ServerSpec, TritonServer, free_port

    texts = ["Triton serves embeddings with dynamic batching.", "A dog runs in the park.",
             "Embedding services are one forward pass, not a generation loop; route texts by length so long "
             "documents do not slow down short queries."]
    if rebuild or not has_manifest(out_dir):
        run_build(spec_from_options(None, out_dir), force=True, log=say)
    else:
        say(f"reusing the repository in {out_dir} (built {read_manifest(out_dir).extra.get('built_at', '?')}); "
            "--rebuild builds it again")
    spec = ServerSpec(out_dir, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port())
    say(f"starting tritonserver on {spec.host} (gRPC {spec.grpc_port}, HTTP {spec.http_port})")
    with TritonServer(spec) as srv:
        with EmbeddingClient(srv.grpc_url, "all_minilm_l6_v2") as c:
            c.embed(texts[:1])  # first call opens the channel
            for t in texts:
                t0 = time.perf_counter()
                v = c.embed([t])[0]
                ms = (time.perf_counter() - t0) * 1e3
                say(f"{ms:6.1f} ms  dim {v.size}  [{', '.join(f'{x:+.4f}' for x in v[:4])}, ...]  {t[:50]!r}")
            t0 = time.perf_counter()
            c.embed(texts)
            say(f"{(time.perf_counter() - t0) * 1e3:6.1f} ms  for all {len(texts)} texts in one request")
    say("server stopped")
