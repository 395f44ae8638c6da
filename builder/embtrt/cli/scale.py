"""Scaling out: `embtrt gateway` (scale/gateway/) and `embtrt k8s` (scale/k8s.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..common.options import parse_int_list
from .app import app, say


@app.command()
def gateway(
    repo: list[Path] = typer.Argument(..., help="The repository the pools serve (its embtrt.json and tokenizer.json are read); several repositories put several models behind one gateway (`model` picks one)."),
    triton: Optional[str] = typer.Option(None, help="gRPC address of the tritonserver for every bucket without a --pool. Default: none."),
    pool: Optional[list[str]] = typer.Option(None, help="[MODEL:]BUCKET=HOST:PORT[,HOST:PORT...]: the replicas serving that bucket (round robin, retried on another replica); MODEL: limits it to one model of several. Repeat per bucket. Default: none."),
    host: str = typer.Option("127.0.0.1", help="Address to bind. Default 127.0.0.1 (loopback only)."),
    port: int = typer.Option(8080, help="HTTP port. Default 8080."),
    api_key_env: Optional[str] = typer.Option(None, help="Name of an environment variable holding the API key; requests must send Authorization: Bearer <key>. Default: no key."),
    tls_cert: Optional[Path] = typer.Option(None, help="PEM certificate (chain) to serve HTTPS with; needs --tls-key. Default: plain HTTP."),
    tls_key: Optional[Path] = typer.Option(None, help="PEM private key of --tls-cert. Default: none."),
    pool_tls_ca: Optional[Path] = typer.Option(None, help="PEM CA certificate: gRPC to the pools (and --triton) over TLS, their certificates verified against it. Default: plaintext gRPC."),
    route: str = typer.Option("auto", help="auto | frontdoor | ids | text. frontdoor: text to the model's front door, which tokenizes, routes and batches (one pool only); ids: token ids to the bucket encoders of each length pool; text: text to the NAME_<L> ensembles. Default auto: frontdoor when a model's buckets are all in one pool (once its front door is ready), for requests that arrive while others are in flight, ids for a request that arrives alone and with length pools (measured: benchmarks/README.md)."),
    max_items: int = typer.Option(2048, help="Most items per request (OpenAI's limit). Default 2048."),
    max_body_bytes: int = typer.Option(16 << 20, help="Largest request body; larger ones get 413. Default 16777216."),
    coalesce_us: int = typer.Option(2000, help="Rows of concurrent requests go upstream as one call: per bucket on --route ids (at most the bucket's max batch), per prompt and truncation on --route frontdoor (at most the front door's max batch). A call goes out at once while fewer than --coalesce-inflight calls per replica are in flight for the pool, so a lone request never waits; otherwise rows wait for a free slot, at most this many microseconds. 0 disables coalescing. Default 2000 (measured: benchmarks/README.md)."),
    coalesce_inflight: int = typer.Option(2, help="Upstream calls per replica in flight for a pool before items wait to be coalesced. Default 2 (the python-* encoders' instance count)."),
    token_ids: bool = typer.Option(False, "--token-ids/--no-token-ids", help="Accept token-id input (lists of ints), embedded as the model's own vocabulary. Off by default: clients such as LangChain's OpenAIEmbeddings send ids of another vocabulary (tiktoken) unless check_embedding_ctx_length=False. Default off."),
    max_request_chars: int = typer.Option(2_000_000, help="Most characters of text per request; more get 413. Default 2000000."),
    max_request_tokens: int = typer.Option(262_144, help="Most tokens per request (after truncation, prompts and special tokens included); more get 413. Default 262144."),
    max_vector_bytes: int = typer.Option(32 << 20, help="Most bytes of token vectors (float32, as the front door's parts pad them) one request may bring into the gateway (multi-vector models: /embed_all, /pooling, /v1/encode, and ranking by MaxSim or a bge-m3 mode that reads ColBERT vectors); a request that may reach more gets 413. Default 33554432 (32 MiB: one bge-m3 document of 8192 tokens)."),
    max_concurrent_requests: int = typer.Option(256, help="Requests served at once; more get 429 with Retry-After. Default 256."),
    cpu_threads: int = typer.Option(2, help="Threads for JSON and tokenization of large requests, off the event loop. Default 2."),
    request_timeout: float = typer.Option(60.0, help="Seconds a request may take from its first byte (body included); past it 504. Default 60."),
    header_timeout: float = typer.Option(10.0, help="Seconds a connection has to send a request's headers; then it is closed. Default 10."),
    body_timeout: float = typer.Option(30.0, help="Seconds to receive a request's body; past it 408 and the connection is closed. Default 30."),
    idle_timeout: float = typer.Option(5.0, help="Seconds a kept-alive connection may stay idle. Default 5."),
    max_connections: int = typer.Option(1024, help="Connections and requests at once; beyond it 503. Default 1024."),
    default_model: Optional[str] = typer.Option(None, help="The model a request without `model` (TEI's bodies have none) goes to where several models serve its route; GET /info describes it. Default: the only model serving the route, else such a request gets 422 naming the models."),
    cors_allow_origin: Optional[list[str]] = typer.Option(None, help="An origin browsers may call the gateway from, e.g. https://app.example.com (repeat for several; * for any): CORS headers and preflight answers for it. Default: none (no CORS headers)."),
    served_model_name: Optional[list[str]] = typer.Option(None, help="The name clients call the model by, in place of its own (clients with a hard-coded model name): NAME for the only model, MODEL=NAME for one of several; repeat for aliases (the first is the name /v1/models and the responses report). Default: each model's own name."),
    otlp_endpoint: Optional[str] = typer.Option(None, help="OTLP/HTTP traces endpoint of an OpenTelemetry collector, e.g. http://otel-collector:4318/v1/traces: a span per request (the child of its traceparent) and its stages, the context passed on to Triton (docs/observability.md; pip install 'embtrt[tracing]'). Default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing."),
    trace_sample: Optional[float] = typer.Option(None, help="Fraction of requests traced that come without a sampled traceparent (those with one follow it). Default: OTEL_TRACES_SAMPLER_ARG, else 1.0."),
) -> None:
    """OpenAI-, TEI-, Cohere-, vLLM- and NIM-compatible routes in front of length pools of tritonservers, routed by exact token count."""
    from ..repository.manifest import read_manifest
    from ..scale.gateway.config import GatewayConfig, api_key_from, parse_pool, parse_served_names
    from ..scale.gateway.http import run

    key = api_key_from(api_key_env)
    cfg = GatewayConfig(repo[0], more_repositories=tuple(repo[1:]), triton=triton, pools=tuple(parse_pool(p) for p in (pool or [])),
                        api_key=key, tls_cert=tls_cert, tls_key=tls_key, pool_tls_ca=pool_tls_ca, route=route, max_items=max_items, max_body_bytes=max_body_bytes,
                        coalesce_us=coalesce_us, coalesce_inflight=coalesce_inflight, token_ids=token_ids,
                        max_request_chars=max_request_chars, max_request_tokens=max_request_tokens,
                        max_vector_bytes=max_vector_bytes, max_concurrent=max_concurrent_requests, cpu_threads=cpu_threads, timeout_s=request_timeout,
                        header_timeout_s=header_timeout, body_timeout_s=body_timeout, idle_timeout_s=idle_timeout,
                        max_connections=max_connections, default_model=default_model,
                        served_names=parse_served_names(served_model_name or [], [read_manifest(r).name for r in repo]),
                        cors_origins=tuple(cors_allow_origin or ()), otlp_endpoint=otlp_endpoint, trace_sample=trace_sample)
    run(cfg, host, port, log=say)


@app.command()
def k8s(
    repo: list[Path] = typer.Argument(..., help="The repository to deploy (its embtrt.json decides models, buckets and target); several put several models on pools of their own behind one gateway (each model's claim is <model>-repository)."),
    out_dir: Path = typer.Option(..., "--out", help="Folder for the YAML files and kustomization.yaml (required)."),
    pools: Optional[str] = typer.Option(None, help="Upper bucket of each length pool, e.g. 128,256 (pool 1: buckets <= 128; pool 2: the rest). Default: one pool per bucket."),
    image: Optional[str] = typer.Option(None, help="tritonserver image of the pools (by digest preferably); the repository's bundle must match its Python (see --server-python). Default embtrt-pool:<version>-tritonserver-25.06 (make images, deploy/pool.Containerfile)."),
    server_python: Optional[str] = typer.Option(None, help="Python of the pool image's tritonserver, e.g. 3.12; the repositories are refused unless built for it. Default: from an NGC release in --image (23.xx/24.xx: 3.10, 25.xx: 3.12), else required."),
    engines_image: Optional[str] = typer.Option(None, help="Image of the `embtrt engines` init container, with embtrt and TensorRT: required for TensorRT targets (the pool image has no embtrt). Default: none."),
    gateway_image: Optional[str] = typer.Option(None, help="Image with embtrt's base install for the gateway. Default embtrt-gateway:<version> (make images, deploy/gateway.Containerfile)."),
    tls_secret: Optional[str] = typer.Option(None, help="kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt; its certificate names the gateway's and the pools' Services): HTTPS at the gateway and TLS gRPC to the pools. Default: none (plain)."),
    gateway_replicas: int = typer.Option(2, help="Minimum gateway replicas. Default 2."),
    gpus: int = typer.Option(1, help="nvidia.com/gpu per pool pod (TensorRT targets). Default 1."),
    replicas: int = typer.Option(1, help="Minimum replicas per pool. Default 1."),
    max_replicas: int = typer.Option(8, help="HPA maximum per pool. Default 8."),
    target_queue_ms: float = typer.Option(50.0, help="HPA target: average Triton queue time per request, ms. Default 50."),
    drain_grace: int = typer.Option(10, help="Seconds a terminating pool pod keeps serving (preStop) while endpoints and the gateway move to other replicas; then its Python models refuse new requests with UNAVAILABLE and the calls in flight finish before tritonserver stops. Default 10."),
    repo_pvc: Optional[str] = typer.Option(None, help="PersistentVolumeClaim holding the repository (not rendered: create and fill it first, docs/scale-out.md#the-repository-volume). Default <name>-repository."),
    pool_cpu: str = typer.Option("4", help="CPU of each pool pod (request = limit), a Kubernetes quantity such as 2 or 500m. Default 4."),
    pool_memory: str = typer.Option("16Gi", help="Memory of each pool pod (request = limit), such as 8Gi. Default 16Gi."),
    namespace: Optional[str] = typer.Option(None, help="Namespace set in kustomization.yaml. Default: none."),
    alert_p99_ms: Optional[float] = typer.Option(None, help="p99 in ms the latency alert holds the gateway's routes to (alert-rules.yaml). Default: the SLO `embtrt tune` tuned the repository for, else 1000."),
    prometheus_operator: bool = typer.Option(False, "--prometheus-operator", help="Also render monitoring.yaml: a PrometheusRule with the alert rules and PodMonitors for the pools and the gateway (the Prometheus Operator's CRDs). Default: off (the dashboard and rules as ConfigMaps only)."),
    otlp_endpoint: Optional[str] = typer.Option(None, help="OTLP/HTTP traces endpoint of an OpenTelemetry collector the pods reach, e.g. http://otel-collector.monitoring:4318/v1/traces: the gateway's spans and Triton's OpenTelemetry trace mode in the pools, one trace per request (docs/observability.md). Default: no tracing (this machine's OTEL_* variables are not read)."),
    trace_sample: float = typer.Option(1.0, help="Fraction of requests traced (a sampled traceparent from the caller is always followed at the gateway). Default 1.0."),
) -> None:
    """Render Kubernetes YAML: length pools of tritonservers (Deployment, Service, HPA, PDB), the gateway, a NetworkPolicy, a Grafana dashboard and Prometheus alert rules."""
    from ..scale.k8s import K8sSpec, write

    spec = K8sSpec(repo[0], out_dir, more_repositories=tuple(repo[1:]), pools=parse_int_list("pools", pools) or (),
                   **{k: v for k, v in (("image", image), ("gateway_image", gateway_image)) if v is not None},
                   server_python=server_python, tls_secret=tls_secret, gateway_replicas=gateway_replicas,
                   engines_image=engines_image, gpus=gpus,
                   replicas=replicas, max_replicas=max_replicas, target_queue_ms=target_queue_ms,
                   drain_grace_s=drain_grace, repo_pvc=repo_pvc, namespace=namespace, pool_cpu=pool_cpu,
                   pool_memory=pool_memory, alert_p99_ms=alert_p99_ms, prometheus_operator=prometheus_operator,
                   otlp_endpoint=otlp_endpoint, trace_sample=trace_sample)
    write(spec, log=say)
