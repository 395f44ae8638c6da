"""The `embtrt` command line (Typer). Commands build the spec and call one function."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from .errors import EmbtrtError, require_extra

app = typer.Typer(
    name="embtrt",
    help="Turn a Hugging Face embedding model into a NVIDIA Triton model repository, serve it, prove it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def _fail(exc: EmbtrtError) -> None:
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(exc.message)}")  # messages name extras like embtrt[tensorrt]
    if exc.hint:
        err.print(f"[yellow]hint:[/] {escape(exc.hint)}")
    raise typer.Exit(exc.exit_code)


@app.command()
def build(
    model_dir: Optional[Path] = typer.Argument(None, help="Hugging Face / sentence-transformers model folder. Default: the bundled all-MiniLM-L6-v2."),
    out_dir: Path = typer.Option(..., "--out", help="Repository folder to write (required)."),
    name: Optional[str] = typer.Option(None, help="Front-door model name. Default: derived from the folder, sanitized ([A-Za-z0-9_-])."),
    target: str = typer.Option("auto", help="auto | python-ort | python-openvino | python-torch | onnxruntime | tensorrt. Default auto: tensorrt when CUDA and TensorRT import, else python-ort. python-openvino (bf16 on AMX) is the fastest CPU target that passes the gate."),
    buckets: Optional[str] = typer.Option(None, help="Input-length buckets in tokens, e.g. 32,128,256. Default: 32,128,512,... below the max sequence length, then the max."),
    max_seq_length: Optional[int] = typer.Option(None, help="Max tokens per text. Default: the reference's (sentence_bert_config.json), e.g. 256 for MiniLM."),
    pooling: str = typer.Option("auto", help="auto | cls | mean | last-token. Default auto: from 1_Pooling/config.json; cls for encoders, last-token for decoders without one."),
    normalize: Optional[bool] = typer.Option(None, "--normalize/--no-normalize", help="L2-normalize vectors. Default: as the model's Normalize module says (on when not a sentence-transformers folder)."),
    pooler: Optional[str] = typer.Option(None, help="fused | python. Default fused: pooling + L2 inside the ONNX graph; python: a Python-backend pooler model (the default for a model whose Pooling config says include_prompt false: prompt tokens are left out of pooling, outside the graph)."),
    prompt: Optional[list[str]] = typer.Option(None, help="NAME=TEXT: a prompt requests may pick by prompt_name (input_type query / passage / document maps onto query / passage or document). Repeatable; overrides the model's config_sentence_transformers.json. Default: the model's prompts."),
    default_prompt: Optional[str] = typer.Option(None, help="NAME | none: the prompt applied when a request picks none, as SentenceTransformer.encode does. Default: the model's default_prompt_name."),
    dimensions: Optional[str] = typer.Option(None, help="Matryoshka widths a request may ask for, e.g. 64,128,256,512,1024 (from the model card). Default: any width from 1 to the model's dimension."),
    max_batch_size: int = typer.Option(32, help="Largest batch of any model (the front door's max_batch_size). Default 32."),
    max_batch_tokens: int = typer.Option(16384, help="Token budget per encoder run: each bucket's max batch (config, preferred sizes, TensorRT profile, CUDA graphs, warm-up) is min(--max-batch-size, budget // bucket length). Default 16384."),
    max_queue_delay_us: int = typer.Option(2000, help="Dynamic batching max_queue_delay_microseconds. Default 2000."),
    preferred_batch_sizes: Optional[str] = typer.Option(None, help="Dynamic batching preferred_batch_size list, e.g. 8,16,32. Default: up to three powers of two ending at max-batch-size."),
    instances: int = typer.Option(1, help="instance_group count per model. Default 1."),
    encoder_instances: Optional[int] = typer.Option(None, help="instance_group count of each bucket's encoder. Default: 2 for the python-* targets (one instance showed 5 s stalls in Triton 2.51's dynamic batcher under load through the gateway), else --instances."),
    front_door_instances: Optional[int] = typer.Option(None, help="instance_group count of the front door. Default: 2 when it runs the encoder itself (python-* targets; one instance showed 500 ms stalls in Triton's dynamic batcher under load), else --instances. 1 gives the lowest single-request latency."),
    precision: str = typer.Option("fp32", help="fp32 | fp16 | bf16 | int8 | fp8. Default fp32. python-ort: fp32, int8; python-openvino, python-torch: fp32, bf16; onnxruntime: fp32, fp16, int8; tensorrt: all, written into the ONNX (fp16/bf16: ModelOpt AutoCast; int8/fp8: ModelOpt Q/DQ) and gated on this CPU."),
    overflow: str = typer.Option("truncate", help="truncate | reject | chunk texts longer than the max sequence length. truncate: as sentence-transformers; reject: that request fails; chunk: the front door embeds max-length windows (overlapping by --overflow-stride) and returns their mean, normalized as the model does (an approximation). Default truncate."),
    overflow_stride: int = typer.Option(32, help="--overflow chunk: tokens shared by consecutive windows. Default 32."),
    max_queue_size: int = typer.Option(256, help="Bounded queue per model; overload is rejected at once. 0 = unbounded. Default 256."),
    queue_timeout_us: int = typer.Option(30_000_000, help="Requests waiting longer in the queue are rejected. Default 30000000 (30 s)."),
    ort_threads: int = typer.Option(0, help="Encoder threads per instance (ONNX Runtime intra-op, OpenVINO, PyTorch). Default 0 (the runtime decides)."),
    router_encoder: str = typer.Option("auto", help="auto | local | bls. How the front door runs the encoder: local = the encoder runs inside the front door (one stub hop less); bls = calls each bucket's encoder model. Default auto: local for the python-* targets, bls for onnxruntime and tensorrt."),
    ort_spinning: bool = typer.Option(False, help="Let ONNX Runtime threads spin-wait. Default off (on 2 cores it stalled requests by ~500 ms)."),
    ort_device: str = typer.Option("cpu", help="cpu | gpu, for --target onnxruntime. Default cpu."),
    ort_trt_fp16: bool = typer.Option(False, help="onnxruntime target on GPU: add the TensorRT execution accelerator in FP16. Default off."),
    fp32_layers: bool = typer.Option(False, help="tensorrt fp16/bf16: AutoCast also keeps LayerNorm, Softmax and reductions in fp32 (the pooling head always is). Default off."),
    builder_opt_level: int = typer.Option(3, help="tensorrt builder optimization level 0..5. Default 3."),
    calibration_file: Optional[Path] = typer.Option(None, help="tensorrt reduced precision: real texts (one per line, or a JSON list) for AutoCast's range check and Q/DQ calibration, per bucket. Default: the bundled corpus."),
    corpus: Optional[Path] = typer.Option(None, help="Real texts for the parity gate (JSON list or one per line). Default: the bundled sample."),
    run_overhead_tokens: Optional[int] = typer.Option(None, help="Fixed cost of one encoder run, in tokens, used to cut mixed-length batches into padded chunks. Default: measured on the built encoder at build time."),
    trust_remote_code: bool = typer.Option(False, help="Allow the model folder's own Python code. Default off."),
    bundle_deps: bool = typer.Option(True, "--bundle-deps/--no-bundle-deps", help="Put the wheels the Python-backend models import (tokenizers; the encoder runtime for python-ort / python-openvino) into the repository, so a stock tritonserver loads it. Default on."),
    server_python: Optional[str] = typer.Option(None, help="Python version of the serving tritonserver's Python backend, for the bundled wheels, e.g. 3.12 for current NGC images. Default: this interpreter's version."),
    allow_mismatch: bool = typer.Option(False, help="Keep encoders that fail the quality gate (recorded in embtrt.json). Default off."),
    force: bool = typer.Option(False, help="Replace --out when it exists. Default off."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON on stdout; progress goes to stderr."),
) -> None:
    """Build a Triton model repository from an embedding model folder."""
    log = (lambda m: err.print(m, markup=False)) if as_json else (lambda m: out.print(m, markup=False))
    try:
        require_extra("build", "build", "torch", "transformers", "sentence_transformers", "onnx", "onnxruntime")
        from .export import build as run_build
        from .export.spec import spec_from_options

        spec = spec_from_options(
            model_dir, out_dir, name=name, target=target, pooling=pooling, normalize=normalize, buckets=buckets,
            max_seq_length=max_seq_length, max_batch_size=max_batch_size, preferred_batch_sizes=preferred_batch_sizes,
            max_batch_tokens=max_batch_tokens,
            max_queue_delay_us=max_queue_delay_us, instances=instances, front_door_instances=front_door_instances,
            encoder_instances=encoder_instances, precision=precision, pooler=pooler or "fused", pooler_given=pooler is not None,
            prompt_overrides=prompt, default_prompt_override=default_prompt, dimensions=dimensions,
            overflow=overflow, overflow_stride=overflow_stride, max_queue_size=max_queue_size, queue_timeout_us=queue_timeout_us,
            ort_threads=ort_threads, ort_device=ort_device, ort_spinning=ort_spinning,
            router_encoder=router_encoder, ort_trt_fp16=ort_trt_fp16, fp32_layers=fp32_layers,
            builder_opt_level=builder_opt_level, calibration_file=calibration_file,
            trust_remote_code=trust_remote_code, allow_mismatch=allow_mismatch, run_overhead_tokens=run_overhead_tokens,
            bundle_deps=bundle_deps, server_python=server_python,
        )
        result = run_build(spec, force=force, corpus=corpus, log=log)
    except EmbtrtError as exc:
        _fail(exc)
        return
    if as_json:
        sys.stdout.write(json.dumps(result.manifest, indent=2, default=str) + "\n")
    elif result.pending:
        out.print(f"[yellow]pending:[/] {len(result.pending)} TensorRT plans; run `embtrt engines {result.repository}` on the GPU host")


@app.command()
def check(repo: list[Path] = typer.Argument(..., help="A model repository written by embtrt build; several are also checked for serving together (model names, bundle Python)."),
          server_python: Optional[str] = typer.Option(None, help="Python version of the tritonserver that will serve it (e.g. 3.12): the bundle must be built for it. Default: not checked."),
          as_json: bool = typer.Option(False, "--json", help="Print the verdicts as JSON.")) -> None:
    """Check a repository: every config.pbtxt against Triton's model_config.proto, ensemble maps, files, token budget, bundle."""
    from .repository.bundle_record import parse_python
    from .repository.check import CheckReport, check_repository, repositories_conflicts

    try:
        rep = CheckReport()
        for r in repo:
            one = check_repository(r, allow_pending_plans=True,
                                   server_python=parse_python(server_python) if server_python else None)
            rep.items += [(ok, f"{r.name}: {m}" if len(repo) > 1 else m) for ok, m in one.items]
            rep.pending += one.pending
        if len(repo) > 1:
            conflicts = repositories_conflicts(repo)
            for c in conflicts:
                rep.fail(c)
            if not conflicts:
                rep.ok(f"{len(repo)} repositories can be served by one tritonserver (distinct model names, one server Python)")
    except EmbtrtError as exc:
        _fail(exc)
        return
    if as_json:
        sys.stdout.write(json.dumps({"passed": rep.passed, "items": rep.lines()}, indent=2) + "\n")
    else:
        for line in rep.lines():
            out.print(line, markup=False)
    if not rep.passed:
        raise typer.Exit(5)


@app.command()
def engines(
    repo: Path = typer.Argument(..., help="Repository written by `embtrt build --target tensorrt`."),
    force: bool = typer.Option(False, help="Rebuild every plan, even those that match. Default off."),
    check_only: bool = typer.Option(False, "--check", help="Only report missing / stale / foreign plans; exit 1 if any. Default off."),
    allow_mismatch: bool = typer.Option(False, help="Keep plans that fail the quality gate against their ONNX. Default off."),
    corpus: Optional[Path] = typer.Option(None, help="Texts for the plan-vs-ONNX parity check. Default: the bundled sample."),
) -> None:
    """On the GPU host: build every missing, stale or foreign TensorRT plan in place (usable as an init container).
    Needs TensorRT, nvidia-ml-py and Polygraphy (pip install 'embtrt[tensorrt]'), not PyTorch."""
    from .export.onnx2trt import build_engines, check_plans
    from .common.corpus import load_corpus

    log = lambda m: out.print(m, markup=False)  # noqa: E731
    try:
        if check_only:
            states = check_plans(repo)
            for st in states:
                log(f"[{st.state}] {st.message}")
            raise typer.Exit(1 if any(st.needs_build for st in states) else 0)
        require_extra("tensorrt", "engines", "onnxruntime", "polygraphy")
        build_engines(repo, force=force, allow_mismatch=allow_mismatch,
                      texts=load_corpus(corpus) if corpus else None, log=log)
    except EmbtrtError as exc:
        _fail(exc)


@app.command()
def serve(
    repo: list[Path] = typer.Argument(..., help="Model repository written by embtrt build; several serve several models from one tritonserver (names must differ, bundles for the same Python)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind. Default 127.0.0.1 (loopback only); 0.0.0.0 exposes it."),
    grpc_port: int = typer.Option(8001, help="gRPC port. Default 8001; 0 picks a free one."),
    http_port: int = typer.Option(8000, help="HTTP port. Default 8000; 0 picks a free one."),
    metrics_port: int = typer.Option(8002, help="Prometheus metrics port. Default 8002; 0 picks a free one."),
    tritonserver: Optional[Path] = typer.Option(None, help="tritonserver binary. Default: the nvidia-pytriton wheel's, else PATH."),
    backend_directory: Optional[Path] = typer.Option(None, help="--backend-directory for tritonserver. Default: prepared for the wheel's server."),
    probe_interval: float = typer.Option(5.0, help="Seconds between inference probes; 0 disables supervision. Default 5."),
    startup_timeout: float = typer.Option(300.0, help="Seconds to wait for every model to be ready. Default 300."),
    failures_to_recover: int = typer.Option(2, help="Consecutive failed probes before tritonserver is restarted. Default 2."),
    python_env: Optional[Path] = typer.Option(None, help="Run the Python-backend stubs with this environment's python3 (a venv or prefix) and none of embtrt's packages, as a stock tritonserver image does. Default: embtrt's own environment."),
) -> None:
    """Serve a repository with tritonserver; recover when an inference probe fails; stop on Ctrl-C/SIGTERM."""
    from .serve.server import ServerSpec, free_port
    from .serve.supervise import Supervisor

    spec = ServerSpec(repository=repo[0], more_repositories=tuple(repo[1:]), host=host,
                      grpc_port=grpc_port or free_port(host), http_port=http_port or free_port(host),
                      metrics_port=metrics_port or free_port(host), tritonserver=tritonserver,
                      backend_directory=backend_directory, startup_timeout_s=startup_timeout, python_env=python_env)
    try:
        Supervisor(spec, probe_interval_s=probe_interval, failures_to_recover=failures_to_recover, log=lambda m: out.print(m, markup=False)).run()
    except EmbtrtError as exc:
        _fail(exc)


@app.command()
def embed(
    texts: list[str] = typer.Argument(..., help="Texts to embed."),
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address. Default 127.0.0.1:8001."),
    model: str = typer.Option("all_minilm_l6_v2", help="Model to call (the front door). Default all_minilm_l6_v2."),
    prompt_name: Optional[str] = typer.Option(None, help="Request option: one of the model's prompts (embtrt.json lists them). Default: the model's default prompt."),
    input_type: Optional[str] = typer.Option(None, help="Request option: query | passage | document, mapped onto the model's prompts. Default: none."),
    dimensions: Optional[int] = typer.Option(None, help="Request option: Matryoshka width (the first D components, renormalized when the model normalizes). Default: the full width."),
    truncate: Optional[str] = typer.Option(None, help="Request option: END (keep the start) | START (keep the end) | NONE (an over-long text is an error). Default: the build's --overflow."),
    embedding_type: Optional[str] = typer.Option(None, help="Request option: float | int8 | uint8 | binary | ubinary (sentence-transformers' quantize_embeddings). Default float."),
    as_json: bool = typer.Option(False, "--json", help="Print {identity, latency_ms, embeddings} as JSON."),
) -> None:
    """Embed texts over gRPC and print the vectors with the latency."""
    import time

    from .serve.client import EmbeddingClient

    try:
        with EmbeddingClient(url, model) as c:
            meta = c.metadata()
            t0 = time.perf_counter()
            vecs = c.embed(texts, prompt_name=prompt_name, input_type=input_type, dimensions=dimensions,
                           truncate=truncate, embedding_type=embedding_type)
            ms = (time.perf_counter() - t0) * 1e3
    except EmbtrtError as exc:
        _fail(exc)
        return
    if as_json:
        sys.stdout.write(json.dumps({"model": model, "identity": meta.identity, "latency_ms": ms,
                                     "embeddings": vecs.tolist()}) + "\n")
        return
    out.print(f"{model} ({meta.identity.get('embtrt.backend_profile', '?')}), dim {vecs.shape[1]}, "
              f"{len(texts)} texts in {ms:.1f} ms", markup=False)
    for t, v in zip(texts, vecs):
        if v.dtype.kind == "f":
            head = ", ".join(f"{x:+.4f}" for x in v[:6])
            out.print(f"  |v|={float((v ** 2).sum() ** 0.5):.4f} [{head}, ...]  {t[:60]!r}", markup=False)
        else:
            out.print(f"  {v.dtype} x{v.size} [{', '.join(str(int(x)) for x in v[:8])}, ...]  {t[:60]!r}", markup=False)


@app.command()
def probe(
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address. Default 127.0.0.1:8001."),
    model: Optional[list[str]] = typer.Option(None, help="Model to probe; repeat for several. A model and its NAME_<L> ensembles must agree; different models (several repositories on one server) are probed each on its own. Default all_minilm_l6_v2."),
    expand: bool = typer.Option(True, "--expand/--no-expand", help="Also probe each NAME_<L> bucket ensemble of the first model. --no-expand probes only the --model names (a length pool's own ensembles). Default on."),
    timeout: float = typer.Option(10.0, help="Seconds per request. Default 10."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Liveness by real inference through the front door and every bucket; exit 1 when any fails."""
    from .serve.probe import probe_models

    r = probe_models(url, model or ["all_minilm_l6_v2"], timeout, expand=expand)
    if as_json:
        sys.stdout.write(json.dumps({"ok": r.ok, "latency_ms": r.latency_ms, "errors": r.errors,
                                     "checked": r.checked}) + "\n")
    else:
        out.print(r.summary(), markup=False)
    raise typer.Exit(0 if r.ok else 1)


@app.command()
def demo(
    out_dir: Path = typer.Option(Path("repo"), "--out", help="Repository folder. Default ./repo (built when missing)."),
    rebuild: bool = typer.Option(False, help="Rebuild even when --out holds a repository. Default off."),
) -> None:
    """The main job on the bundled model: build, serve on free loopback ports, embed texts over gRPC, stop."""
    import time

    from .export import build as run_build
    from .export.spec import spec_from_options
    from .repository.manifest import has_manifest
    from .serve.client import EmbeddingClient
    from .serve.server import ServerSpec, TritonServer, free_port

    try:
        require_extra("build", "demo", "torch", "transformers", "sentence_transformers", "onnx", "onnxruntime")
    except EmbtrtError as exc:
        _fail(exc)
    texts = ["Triton serves embeddings with dynamic batching.", "A dog runs in the park.",
             "Embedding services are one forward pass, not a generation loop; route texts by length so long "
             "documents do not slow down short queries."]
    log = lambda m: out.print(m, markup=False)  # noqa: E731
    try:
        if rebuild or not has_manifest(out_dir):
            run_build(spec_from_options(None, out_dir), force=True, log=log)
        spec = ServerSpec(out_dir, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port())
        log(f"starting tritonserver on {spec.host} (gRPC {spec.grpc_port}, HTTP {spec.http_port})")
        with TritonServer(spec) as srv:
            with EmbeddingClient(srv.grpc_url, "all_minilm_l6_v2") as c:
                c.embed(texts[:1])  # first call opens the channel
                for t in texts:
                    t0 = time.perf_counter()
                    v = c.embed([t])[0]
                    ms = (time.perf_counter() - t0) * 1e3
                    log(f"{ms:6.1f} ms  dim {v.size}  [{', '.join(f'{x:+.4f}' for x in v[:4])}, ...]  {t[:50]!r}")
                t0 = time.perf_counter()
                c.embed(texts)
                log(f"{(time.perf_counter() - t0) * 1e3:6.1f} ms  for all {len(texts)} texts in one request")
        log("server stopped")
    except EmbtrtError as exc:
        _fail(exc)


@app.command()
def verify(
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address. Default 127.0.0.1:8001."),
    model: str = typer.Option("all_minilm_l6_v2", help="Served model (front door or a NAME_<L> ensemble). Default all_minilm_l6_v2."),
    reference: Optional[Path] = typer.Option(None, help="Reference model folder. Default: the bundled all-MiniLM-L6-v2."),
    corpus: Optional[Path] = typer.Option(None, help="Texts: JSON list or one per line. Default: the bundled real-text sample (370 texts)."),
    ref_pooling: Optional[str] = typer.Option(None, help="Reference pooling for non-sentence-transformers folders: cls | mean | last-token. Default: from the model."),
    cosine_p50: float = typer.Option(0.9999, help="Gate: cosine p50 per bucket, at least. Default 0.9999."),
    cosine_p01: float = typer.Option(0.999, help="Gate: cosine p01 per bucket, at least. Default 0.999."),
    top10_overlap: float = typer.Option(0.98, help="Gate: top-10 neighbour overlap, at least. Default 0.98."),
    recall_regression: float = typer.Option(0.005, help="Gate: recall@10 regression, at most. Default 0.005."),
    under_load: bool = typer.Option(False, help="Also resend every text at --concurrency in mixed-length requests with background traffic; each vector must equal its unloaded value. Default off."),
    concurrency: int = typer.Option(64, help="Concurrency of --under-load. Default 64."),
    load_cosine: float = typer.Option(0.999, help="--under-load: cosine to the unloaded vector, at least. Default 0.999."),
    index_identity: Optional[Path] = typer.Option(None, help="embtrt.json (or identity JSON) of the deployment your index was built with; differences are warned about. Default none."),
    prompt_name: Optional[str] = typer.Option(None, help="Request option: embed with this prompt, against SentenceTransformer.encode(prompt_name=...). Default: the model's default prompt on both sides."),
    against: Optional[str] = typer.Option(None, help="HOST:PORT[/MODEL]: a second deployment (default model: --model) to gate --url against instead of the reference model (cross-backend release gate: cosine per bucket, top-10 overlap, recall@10; identities compared). --reference then only counts tokens for the length buckets. Default: none."),
    dimensions: Optional[int] = typer.Option(None, help="Request option: Matryoshka width, against encode(truncate_dim=D) normalized as the model does. Default: the full width."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON; progress to stderr."),
) -> None:
    """The vector-quality gate: served vectors vs the reference, per length bucket; exit 4 when any gate fails."""
    from .common.corpus import load_corpus
    from .measure.verify import verify as run_verify
    from .reference.modelinfo import default_model_path
    from .reference.torch_ref import Reference
    from .repository.gate import Gate

    log = (lambda m: err.print(m, markup=False)) if as_json else (lambda m: out.print(m, markup=False))
    try:
        gate = Gate(cosine_p50, cosine_p01, top10_overlap, recall_regression)
        if against is not None:
            from .measure.verify import verify_against

            require_extra("build", "verify --against", "transformers")
            other_url, _, other_model = against.partition("/")
            texts = load_corpus(corpus)
            counts = Reference(reference or default_model_path()).token_counts(texts)
            rep = verify_against(url, model, other_url, other_model or model, texts, gate, counts, log=log)
        else:
            require_extra("build", "verify", "torch", "transformers", "sentence_transformers")
            ref = Reference(reference or default_model_path(), pooling=ref_pooling)
            idx = None
            if index_identity is not None:
                doc = json.loads(index_identity.read_text())
                idx = doc.get("identity", doc)
            rep = run_verify(url, model, ref, load_corpus(corpus), gate, under_load=under_load,
                             concurrency=concurrency, load_cosine=load_cosine, index_identity=idx,
                             prompt_name=prompt_name, dimensions=dimensions, log=log)
    except EmbtrtError as exc:
        _fail(exc)
        return
    if as_json:
        sys.stdout.write(json.dumps(rep.as_dict(), indent=2) + "\n")
    else:
        for line in rep.lines():
            out.print(line, markup=False)
    raise typer.Exit(0 if rep.passed else 4)


@app.command()
def bench(
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address of the --model targets. Default 127.0.0.1:8001."),
    model: Optional[list[str]] = typer.Option(None, help="Triton model to benchmark; repeat for several. NAME uses --url; NAME@HOST:PORT another server; a ?key=value&... suffix gives that target its own request options (e.g. NAME?dimensions=128&embedding_type=int8). Default: none."),
    openai_url: Optional[list[str]] = typer.Option(None, help="Base URL of an OpenAI-compatible server; POSTs go to <url>/embeddings (vLLM/TEI: http://host:port/v1; infinity: http://host:port). Repeat with --openai-model. Default: none."),
    openai_model: Optional[list[str]] = typer.Option(None, help="Model name sent to each --openai-url, in the same order. Default: none."),
    triton_pid: Optional[list[int]] = typer.Option(None, help="Process (or, negative, process group) of the Triton server, paused while other targets are measured: one for all --model targets, or one per --model in order. Default: none."),
    openai_pid: Optional[list[int]] = typer.Option(None, help="Process of each --openai-url server, in order, paused while other targets are measured (an idle server can poll). Default: none."),
    inprocess: bool = typer.Option(True, "--inprocess/--no-inprocess", help="Add sentence-transformers in process as a reference line. Default on."),
    ort_repo: Optional[Path] = typer.Option(None, help="Repository whose ONNX and tokenizer run in process as the ONNX Runtime fp32 line (one request at a time, and batches of 32). Default: none."),
    engine_repo: Optional[list[Path]] = typer.Option(None, help="Repository whose own encoder (e.g. OpenVINO bf16) runs in process as configured in its front door, as a line like --ort-repo's; repeat for several. Default: none."),
    reference: Optional[Path] = typer.Option(None, help="Model folder for token counts and the in-process line. Default: the bundled all-MiniLM-L6-v2."),
    corpus: Optional[Path] = typer.Option(None, help="Texts: JSON list or one per line. Default: the bundled real-text sample."),
    buckets: str = typer.Option("32,128,256", help="Length bucket edges in tokens; texts are grouped by their token count, plus a 'mixed' scenario. Default 32,128,256."),
    only: Optional[str] = typer.Option(None, help="Run only these bucket labels, e.g. '<=32,mixed'. Default: all."),
    concurrency: str = typer.Option("1,8,32,64", help="Concurrency levels. Default 1,8,32,64."),
    texts_per_request: int = typer.Option(1, help="Texts per request. Default 1."),
    requests: int = typer.Option(200, help="Measured requests per target and scenario. Default 200."),
    warmup: int = typer.Option(20, help="Warm-up requests per target and scenario, excluded. Default 20."),
    rounds: int = typer.Option(1, help="Split each scenario's requests into this many rounds, every target taking its turn in each (the order rotating), and pool them: on a shared machine, slow drifts then fall on every target alike. Warm-up is per round. Default 1."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Write results.json, results.md and PNG plots here. Default: none."),
    cpu_pid: Optional[list[str]] = typer.Option(None, help="LABEL=PID: a process tree (the process and its descendants, e.g. tritonserver with its stubs, or a gateway) whose CPU time per request and peak resident memory (sampled every 50 ms) are recorded in every scenario; repeatable. Default: none."),
    option: Optional[list[str]] = typer.Option(None, help="KEY=VALUE request option sent with every request to the --model and --openai-url targets (prompt_name, input_type, dimensions, truncate, embedding_type); repeatable. Default: none."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON on stdout; progress to stderr."),
    matrix: Optional[Path] = typer.Option(None, help="The stress matrix of this repository instead of a side-by-side run: for each --max-batch-tokens the configs are reloaded (repository API), then every length band (its buckets, or --only) x --concurrency cell runs on real texts of that band, with memory, errors by kind and the cosine of every vector against the text embedded alone; plus a preemption cell and a mixed-traffic cell per budget. The repository is served here (explicit model control) unless --matrix-server. Default: none."),
    max_batch_tokens: Optional[str] = typer.Option(None, help="--matrix: token budgets to run, e.g. 512,1024,2048. Default: the repository's own."),
    matrix_server: Optional[str] = typer.Option(None, help="--matrix: gRPC address of a tritonserver serving the repository with --model-control-mode=explicit. Default: serve it here."),
    preempt_concurrency: int = typer.Option(64, help="--matrix: short-text concurrency running while the long text is sent. Default 64."),
    preempt_repeats: int = typer.Option(2, help="--matrix: times the long text is sent per route and budget. Default 2."),
    texts_per_band: int = typer.Option(8, help="--matrix: distinct texts per band, each embedded alone first. Default 8."),
    pools: bool = typer.Option(False, "--pools/--no-pools", help="--matrix: also the mixed traffic with the longest band's bucket on a second tritonserver (a length pool, started here unless --matrix-pool-server) against both on one. Default off."),
    matrix_pool_server: Optional[str] = typer.Option(None, help="--matrix --pools: gRPC address of a tritonserver (explicit model control) serving the longest band's bucket models. Default: start one here."),
) -> None:
    """Side-by-side load test: Triton and OpenAI-compatible targets on the same texts, per bucket and concurrency."""
    if matrix is not None:
        _bench_matrix(matrix, max_batch_tokens, matrix_server, concurrency, only, requests, corpus, out_dir,
                      preempt_concurrency, preempt_repeats, texts_per_band, as_json, pools, matrix_pool_server)
        return
    from rich.progress import Progress
    from rich.table import Table

    from urllib.parse import parse_qsl

    from .common.corpus import load_corpus
    from .common.options import parse_int_list
    from .measure.bench import Target, markdown, plots_unavailable, run_bench, save
    from .reference.modelinfo import default_model_path
    from .reference.torch_ref import Reference

    try:
        require_extra("build", "bench", "transformers", *(("sentence_transformers",) if inprocess else ()))
        models = model or []
        pids = triton_pid or []
        if len(pids) > 1 and len(pids) != len(models):
            raise EmbtrtError("invalid --triton-pid: give one for all --model targets or one per --model")
        opts = parse_options(option or [])
        targets = []
        for i, m in enumerate(models):
            spec, _, query = m.partition("?")  # NAME[@HOST:PORT][?key=value&...]: this target's own options
            name, _, murl = spec.partition("@")
            tp = (pids[i] if len(pids) > 1 else pids[0],) if pids else ()
            own = {**opts, **parse_options([f"{k}={v}" for k, v in parse_qsl(query)])} if query else opts
            targets.append(Target(f"triton:{m}" if murl or query else f"triton:{name}", "triton", murl or url, name, tp, own))
        ou, om, opid = openai_url or [], openai_model or [], openai_pid or []
        if len(ou) != len(om) or (opid and len(opid) != len(ou)):
            raise EmbtrtError("invalid openai targets: give one --openai-model (and --openai-pid, if any) per --openai-url")
        targets += [Target(f"openai:{m}@{u}", "openai", u, m, (opid[i],) if opid else (), opts)
                    for i, (u, m) in enumerate(zip(ou, om))]
        no_plots = plots_unavailable() if out_dir is not None else None
        if no_plots:  # said before the run, not after it
            err.print(f"warning: {no_plots}; results.json and results.md will be written, the plots skipped", markup=False)
        ref_dir = reference or default_model_path()
        texts = load_corpus(corpus)
        counts = Reference(ref_dir).token_counts(texts)
        edges = parse_int_list("buckets", buckets) or (32, 128, 256)
        levels = parse_int_list("concurrency", concurrency) or (1,)
        only_t = tuple(x for x in only.split(",") if x) if only else None
        console = err if as_json else out
        with Progress(console=console, transient=True) as prog:
            task = prog.add_task("bench", total=None)
            doc = run_bench(targets, texts, counts, buckets=edges, concurrency=levels, texts_per_request=texts_per_request,
                            requests=requests, warmup=warmup, inprocess_model=ref_dir if inprocess else None, ort_repo=ort_repo,
                            engine_repos=tuple(engine_repo or ()),
                            only_buckets=only_t, progress=lambda m: prog.update(task, description=m),
                            cpu_pids=parse_cpu_pids(cpu_pid or []), rounds=rounds)
    except EmbtrtError as exc:
        _fail(exc)
        return
    if out_dir is not None:
        for p in save(doc, out_dir, with_plots=no_plots is None):
            err.print(f"wrote {p}", markup=False)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    if not out.is_terminal:  # a file or a pipe: the whole table, never cut to 80 columns
        sys.stdout.write(markdown(doc))
        return
    table = Table(title="embtrt bench")
    for col in ("target", "bucket", "conc", "req/s", "texts/s", "tokens/s", "p50", "p95", "p99", "max", "err"):
        table.add_column(col, justify="left" if col in ("target", "bucket") else "right")
    for r in doc["results"]:
        table.add_row(r["target"], r["bucket"], str(r["concurrency"]), f"{r['req_per_s']:.1f}", f"{r['texts_per_s']:.1f}",
                      f"{r['tokens_per_s']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}", f"{r['p99_ms']:.1f}",
                      f"{r['max_ms']:.1f}", str(r["errors"]))
    out.print(table)


def _bench_matrix(repo: Path, budgets: str | None, server: str | None, concurrency: str, only: str | None,
                  requests: int, corpus: Path | None, out_dir: Path | None, preempt_concurrency: int,
                  preempt_repeats: int, texts: int, as_json: bool, pools: bool = False,
                  pool_server: str | None = None) -> None:
    from .common.options import parse_int_list
    from .measure.matrix import MatrixSpec, markdown, run_matrix
    from .repository.manifest import read_manifest

    try:
        m = read_manifest(repo)
        bands = tuple(int(x.strip().lstrip("<=")) for x in only.split(",") if x.strip() and x.strip() != "mixed") \
            if only else None
        spec = MatrixSpec(repo, parse_int_list("max_batch_tokens", budgets) or (m.max_batch_tokens or 16384,),
                          concurrency=parse_int_list("concurrency", concurrency) or (1,), bands=bands or None,
                          requests=requests, texts=texts, corpus=corpus, url=server, out=out_dir,
                          preempt_concurrency=preempt_concurrency, preempt_repeats=preempt_repeats,
                          pools=pools or pool_server is not None, pool_url=pool_server)
        doc = run_matrix(spec, log=lambda msg: err.print(msg, markup=False))
    except (EmbtrtError, ValueError) as exc:
        _fail(exc if isinstance(exc, EmbtrtError) else EmbtrtError(f"invalid --only: {exc}"))
        return
    sys.stdout.write(json.dumps(doc, indent=2) + "\n" if as_json else markdown(doc))


@app.command()
def gateway(
    repo: list[Path] = typer.Argument(..., help="The repository the pools serve (its embtrt.json and tokenizer.json are read); several repositories put several models behind one gateway (`model` picks one)."),
    triton: Optional[str] = typer.Option(None, help="gRPC address of the tritonserver for every bucket without a --pool. Default: none."),
    pool: Optional[list[str]] = typer.Option(None, help="[MODEL:]BUCKET=HOST:PORT[,HOST:PORT...]: the replicas serving that bucket (round robin, retried on another replica); MODEL: limits it to one model of several. Repeat per bucket. Default: none."),
    host: str = typer.Option("127.0.0.1", help="Address to bind. Default 127.0.0.1 (loopback only)."),
    port: int = typer.Option(8080, help="HTTP port. Default 8080."),
    api_key_env: Optional[str] = typer.Option(None, help="Name of an environment variable holding the API key; requests must send Authorization: Bearer <key>. Default: no key."),
    route: str = typer.Option("auto", help="auto | frontdoor | ids | text. frontdoor: text to the model's front door, which tokenizes, routes and batches (one pool only); ids: token ids to the bucket encoders of each length pool; text: text to the NAME_<L> ensembles. Default auto: frontdoor when a model's buckets are all in one pool (once its front door is ready), for requests that arrive while others are in flight, ids for a request that arrives alone and with length pools (measured: benchmarks/README.md)."),
    max_items: int = typer.Option(2048, help="Most items per request (OpenAI's limit). Default 2048."),
    max_body_bytes: int = typer.Option(16 << 20, help="Largest request body; larger ones get 413. Default 16777216."),
    coalesce_us: int = typer.Option(2000, help="Rows of concurrent requests go upstream as one call: per bucket on --route ids (at most the bucket's max batch), per prompt and truncation on --route frontdoor (at most the front door's max batch). A call goes out at once while fewer than --coalesce-inflight calls per replica are in flight for the pool, so a lone request never waits; otherwise rows wait for a free slot, at most this many microseconds. 0 disables coalescing. Default 2000 (measured: benchmarks/README.md)."),
    coalesce_inflight: int = typer.Option(2, help="Upstream calls per bucket and replica in flight before items wait to be coalesced. Default 2 (the python-* encoders' instance count)."),
) -> None:
    """OpenAI-compatible /v1/embeddings in front of length pools of tritonservers, routed by exact token count."""
    import os

    from .scale.gateway import GatewayConfig, parse_pool, run

    try:
        key = None
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise EmbtrtError(f"--api-key-env {api_key_env}: that environment variable is empty or unset")
        cfg = GatewayConfig(repo[0], more_repositories=tuple(repo[1:]), triton=triton, pools=tuple(parse_pool(p) for p in (pool or [])), api_key=key,
                            route=route, max_items=max_items, max_body_bytes=max_body_bytes,
                            coalesce_us=coalesce_us, coalesce_inflight=coalesce_inflight)
        run(cfg, host, port, log=lambda m: out.print(m, markup=False))
    except EmbtrtError as exc:
        _fail(exc)


@app.command()
def k8s(
    repo: list[Path] = typer.Argument(..., help="The repository to deploy (its embtrt.json decides models, buckets and target); several put several models on pools of their own behind one gateway (each model's claim is <model>-repository)."),
    out_dir: Path = typer.Option(..., "--out", help="Folder for the YAML files and kustomization.yaml (required)."),
    pools: Optional[str] = typer.Option(None, help="Upper bucket of each length pool, e.g. 128,256 (pool 1: buckets <= 128; pool 2: the rest). Default: one pool per bucket."),
    image: str = typer.Option("nvcr.io/nvidia/tritonserver:25.06-py3", help="tritonserver image of the pools; it needs embtrt installed for the liveness probe (and embtrt[tensorrt] for TensorRT plans). Default nvcr.io/nvidia/tritonserver:25.06-py3."),
    engines_image: Optional[str] = typer.Option(None, help="Image of the `embtrt engines` init container (TensorRT targets). Default: --image."),
    gateway_image: str = typer.Option("embtrt:latest", help="Image with embtrt for the gateway. Default embtrt:latest."),
    gpus: int = typer.Option(1, help="nvidia.com/gpu per pool pod (TensorRT targets). Default 1."),
    replicas: int = typer.Option(1, help="Minimum replicas per pool. Default 1."),
    max_replicas: int = typer.Option(8, help="HPA maximum per pool. Default 8."),
    target_queue_ms: float = typer.Option(50.0, help="HPA target: average Triton queue time per request, ms. Default 50."),
    repo_pvc: Optional[str] = typer.Option(None, help="PersistentVolumeClaim holding the repository. Default <name>-repository."),
    namespace: Optional[str] = typer.Option(None, help="Namespace set in kustomization.yaml. Default: none."),
) -> None:
    """Render Kubernetes YAML: length pools of tritonservers (Deployment, Service, HPA, PDB), the gateway, a NetworkPolicy."""
    from .scale.k8s import K8sSpec, write

    try:
        spec = K8sSpec(repo[0], out_dir, more_repositories=tuple(repo[1:]), pools=tuple(int(x) for x in pools.split(",") if x) if pools else (),
                       image=image, gateway_image=gateway_image, engines_image=engines_image, gpus=gpus,
                       replicas=replicas, max_replicas=max_replicas, target_queue_ms=target_queue_ms,
                       repo_pvc=repo_pvc, namespace=namespace)
        write(spec, log=lambda m: out.print(m, markup=False))
    except ValueError as exc:
        _fail(EmbtrtError(f"invalid --pools {pools!r}: {exc}", "comma-separated bucket sizes, e.g. 128,256"))
    except EmbtrtError as exc:
        _fail(exc)


@app.command()
def tune(
    repo: Path = typer.Argument(..., help="Repository to tune (written by embtrt build)."),
    slo_p99_ms: str = typer.Option(..., help="The latency target at every --concurrency (required): p99 in ms on mixed-length texts, e.g. 100; or per length bucket, BUCKET=MS,..., e.g. 32=50,512=400: each bucket's band of texts measured on its own, each within its own p99."),
    concurrency: str = typer.Option("1,8,32", help="Concurrency levels each trial is measured at. Default 1,8,32."),
    corpus: Optional[Path] = typer.Option(None, help="Texts (JSON list or one per line). Default: the bundled real-text sample."),
    budget_min: float = typer.Option(10.0, help="Time budget in minutes; the search stops when the next trial would not fit. Default 10."),
    requests: int = typer.Option(200, help="Measured requests per concurrency and trial. Default 200."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Write tune.json, tune.md and tune.png here. Default: none."),
    apply_to: Optional[Path] = typer.Option(None, help="Write the winner as a repository here (re-checked with embtrt check; the tuning record goes into embtrt.json). Default: none."),
    url: Optional[str] = typer.Option(None, help="gRPC address of a running tritonserver serving REPO with --model-control-mode=explicit. Default: embtrt serves REPO itself."),
    force: bool = typer.Option(False, help="Let --apply-to replace an existing folder (REPO itself included). Default off."),
    knob: Optional[list[str]] = typer.Option(None, help="Search only this knob; repeatable (front.instances, front.max_queue_delay_us, front.preferred_batch_sizes, front.intra_op_threads, budget.max_batch_tokens, encoder.instances, encoder.max_queue_delay_us, as the repository has them). Default: every knob."),
) -> None:
    """Find the serving configuration with the most throughput whose p99 meets the SLO, with real texts."""
    from .common.options import parse_int_list
    from .measure.tune import TuneSpec, tune as run_tune

    try:
        spec = TuneSpec(repo, parse_slo(slo_p99_ms), concurrency=parse_int_list("concurrency", concurrency) or (1,), corpus=corpus,
                        budget_min=budget_min, out=out_dir, apply_to=apply_to, url=url, force=force, requests=requests,
                        knobs=tuple(knob) if knob else None)
        run_tune(spec, log=lambda m: out.print(m, markup=False))
    except EmbtrtError as exc:
        _fail(exc)


def parse_slo(text: str) -> float | dict[int, float]:
    """'100' -> 100.0; '32=50,512=400' -> {32: 50.0, 512: 400.0}."""
    try:
        if "=" not in text:
            return float(text)
        out = {}
        for part in text.split(","):
            b, _, ms = part.rpartition("=")
            out[int(b.strip().lstrip("<="))] = float(ms)
        return out
    except ValueError:
        raise EmbtrtError(f"invalid --slo-p99-ms {text!r}", "milliseconds (e.g. 100) or BUCKET=MS,... (e.g. 32=50,512=400)") from None


def parse_cpu_pids(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        label, sep, pid = item.partition("=")
        if not sep or not label or not pid.isdigit():
            raise EmbtrtError(f"invalid --cpu-pid {item!r}", "LABEL=PID, e.g. --cpu-pid tritonserver=1234")
        out[label] = int(pid)
    return out


def parse_options(items: list[str]) -> dict:
    """KEY=VALUE request options (dimensions as an integer)."""
    names = ("prompt_name", "input_type", "dimensions", "truncate", "embedding_type")
    out: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in names:
            raise EmbtrtError(f"invalid --option {item!r}", "KEY=VALUE with KEY one of " + ", ".join(names))
        if key == "dimensions":
            if not value.isdigit():
                raise EmbtrtError(f"invalid --option {item!r}: dimensions takes an integer")
            out[key] = int(value)
        else:
            out[key] = value
    return out


def main() -> None:
    app()


if __name__ == "__main__":
    main()
