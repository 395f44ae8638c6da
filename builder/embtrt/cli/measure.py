"""Measuring a deployment: `embtrt verify` and `bench` (the served kind's own: Kind.verify_cli, Kind.bench_cli,
with cli/measure_kinds.py's option records), `matrix` (measure/matrix.py) and `tune` (measure/tune.py), with the
parsers of their options."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from embtrt_backend.kinds import KINDS, kind_of

from ..common.options import parse_int_list
from ..errors import SpecError
from .app import app, err, progress_log, say


@app.command()
def verify(
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address. Default 127.0.0.1:8001."),
    model: Optional[str] = typer.Option(None, help="Served model (front door or a NAME_<L> ensemble). Default: the one embtrt model the server serves (several: name one)."),
    reference: Optional[Path] = typer.Option(None, help="Reference model folder (a reranker or sparse encoder needs the folder it was built from). Default for embedders: the bundled all-MiniLM-L6-v2 when the served model was built from it; another model is refused before any work, naming its identity."),
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
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON; progress to stderr. Default off."),
    trust_remote_code: bool = typer.Option(False, help="Load a reference folder that runs its own code (an auto_map), as `embtrt build --trust-remote-code`. Default off."),
) -> None:
    """The vector-quality gate: served vectors vs the reference, per length bucket; exit 4 when any gate fails."""
    from ..common.plugins import implementation
    from ..serve.client import model_kind, resolve_model
    from .measure_kinds import VerifyOptions

    log = progress_log(as_json)
    if under_load and (prompt_name is not None or dimensions is not None):
        raise SpecError("--under-load compares default requests with their unloaded values",
                        "run it without --prompt-name / --dimensions")
    model = resolve_model(url, model)
    kind = model_kind(url, model)
    o = VerifyOptions(url, model, kind, reference, corpus, ref_pooling, cosine_p50, cosine_p01, top10_overlap, recall_regression,
                      under_load, concurrency, load_cosine, index_identity, prompt_name, against, dimensions, trust_remote_code)
    rep = implementation(kind_of(kind), "verify_cli")(o, log)   # the kind's gate (the embedder's thresholds are these options)
    if as_json:
        sys.stdout.write(json.dumps(rep.as_dict(), indent=2) + "\n")
    else:
        for line in rep.lines:
            say(line)
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
    rerank_documents: Optional[str] = typer.Option(None, help="Rerank scenarios: documents per request (one query each), e.g. 1,10,32,100; the --model targets are rerankers, --openai-url / --openai-model name HTTP rerank APIs of the Cohere shape (POST <url>/rerank: infinity, vLLM, the embtrt gateway's /v1), and --reference (their CrossEncoder folder) adds in-process CrossEncoder.predict (batch 32) on the same pairs. Default: none (embedding scenarios)."),
    classify: bool = typer.Option(False, "--classify", help="Classifier scenarios: the --model targets are classifiers, measured in texts/s at each --concurrency with --texts-per-request real texts each (8 when left at 1); --reference (their model folder) adds in-process transformers (fp32, batch 32) on the same texts. Default off (embedding scenarios)."),
    sparse: bool = typer.Option(False, "--sparse", help="Sparse scenarios: the --model targets are sparse encoders (SPLADE), measured in texts/s per --buckets scenario and --concurrency with --texts-per-request texts each, as documents (or --option input_type=query); --reference (their SparseEncoder folder) adds in-process SparseEncoder.encode_document / encode_query (fp32, batch 32 and one at a time) on the same texts. Default off (embedding scenarios)."),
    images: Optional[Path] = typer.Option(None, "--images", help="Image scenarios: a folder of image files (jpg, png, webp, gif, bmp); the --model targets are text-and-image models, measured in images/s at each --concurrency with --texts-per-request images each; --reference (their model folder) adds in-process SentenceTransformer.encode of the same images (data URIs, batch 32, fp32). Default: none (embedding scenarios)."),
    vlm_images: Optional[Path] = typer.Option(None, "--vlm-images", help="VLM-embedder image scenarios: a folder of image files (jpg, png, webp, gif, bmp); the --model targets are VLM embedders, measured in images/s at each --concurrency with --texts-per-request images each; --reference (their model folder) adds the model card's computation in process on the same images (the processor's PIL backend, one at a time, fp32). Default: none (embedding scenarios)."),
    pages: Optional[Path] = typer.Option(None, "--pages", help="Page-image scenarios: a folder of page images (jpg, png, webp, gif, bmp); the --model targets are page-image retrievers, measured in pages/s at each --concurrency with --texts-per-request pages each; --reference (their ColPali folder) adds in-process ColPaliForRetrieval on the processor's output (PIL backend, batch 8, fp32) of the same pages. Default: none (embedding scenarios)."),
    processes: int = typer.Option(1, help="Load generator processes for the --model (Triton) targets of embedding scenarios: above 1, embtrt.measure.loadgen drives them from that many processes, every request built before the clock starts (a host with cores to spare: the GPU host's 16). Default 1 (this process's asyncio driver)."),
    floor: bool = typer.Option(False, "--floor", help="Embedding scenarios: also serve the floor (a model with the front door's signature and no encoder, on a tritonserver of its own) and drive it as a target with the same generator and texts; the report says, per scenario, whether each Triton target's rate is under a third of the floor's, or may have been the generator's. Needs a tritonserver (embtrt[server]). Default off."),
    option: Optional[list[str]] = typer.Option(None, help="KEY=VALUE request option sent with every request to the --model and --openai-url targets (prompt_name, input_type, dimensions, truncate, embedding_type); repeatable. Default: none."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON on stdout; progress to stderr. Default off."),
    trust_remote_code: bool = typer.Option(False, help="Load a reference folder that runs its own code (an auto_map), as `embtrt build --trust-remote-code`. Default off."),
) -> None:
    """Side-by-side load test: Triton and OpenAI-compatible targets on the same texts, per bucket and concurrency.
    The stress matrix of one repository is `embtrt matrix`."""
    from ..common.plugins import implementation
    from .measure_kinds import BenchOptions

    chosen = {"--rerank-documents": rerank_documents, "--classify": classify or None, "--images": images, "--sparse": sparse or None,
              "--pages": pages, "--vlm-images": vlm_images}
    picked = [k for k in KINDS if k.bench_flag and chosen.get(k.bench_flag) is not None]   # the kind the option picks
    if (processes != 1 or floor) and picked:
        raise SpecError("--processes and --floor apply to embedding scenarios only",
                        "leave them out with --rerank-documents, --classify, --images, --pages, --vlm-images or --sparse")
    if len(picked) > 1:
        raise SpecError(f"{' and '.join(k.bench_flag for k in picked)} pick two kinds' scenarios: give one")
    kind = picked[0] if picked else next(k for k in KINDS if k.bench_cli and not k.bench_flag)   # the embedding scenarios
    o = BenchOptions(url, tuple(model or ()), tuple(openai_url or ()), tuple(openai_model or ()), tuple(triton_pid or ()),
                     tuple(openai_pid or ()), inprocess, ort_repo, tuple(engine_repo or ()), reference, corpus, buckets, only,
                     concurrency, texts_per_request, requests, warmup, rounds, out_dir, tuple(cpu_pid or ()),
                     chosen[kind.bench_flag] if kind.bench_flag else None, processes, floor,
                     tuple(parse_options(option or []).items()), as_json, trust_remote_code)
    implementation(kind, "bench_cli")(o)


@app.command()
def matrix(
    repo: Path = typer.Argument(..., help="Repository to stress (written by embtrt build)."),
    max_batch_tokens: Optional[str] = typer.Option(None, help="Token budgets to run, e.g. 512,1024,2048; for each the configs are reloaded through the repository API (TensorRT plans fix the batch range: refused). Default: the repository's own."),
    only: Optional[str] = typer.Option(None, help="Length bands to run: bucket sizes of the repository, e.g. 32,2048 ('<=32' and 'mixed' are read too). Default: every bucket."),
    concurrency: str = typer.Option("1,8,32,64", help="Concurrency levels of every cell. Default 1,8,32,64."),
    requests: int = typer.Option(64, help="Requests of one text each per cell. Default 64."),
    texts_per_band: int = typer.Option(8, help="Distinct texts per band, each embedded alone first. Default 8."),
    preempt_concurrency: int = typer.Option(64, help="Short-text concurrency running while the long text is sent. Default 64."),
    preempt_repeats: int = typer.Option(2, help="Times the long text is sent per route and budget. Default 2."),
    pools: bool = typer.Option(False, "--pools/--no-pools", help="Also the mixed traffic with the longest band's bucket on a second tritonserver (a length pool, started here unless --pool-server) against both on one. Default off."),
    server: Optional[str] = typer.Option(None, help="gRPC address of a tritonserver serving REPO with --model-control-mode=explicit. Default: REPO is served here."),
    pool_server: Optional[str] = typer.Option(None, help="--pools: gRPC address of a tritonserver (explicit model control) serving the longest band's bucket models; implies --pools. Default: one is started here."),
    corpus: Optional[Path] = typer.Option(None, help="Texts: JSON list or one per line. Default: the bundled real-text sample."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Write matrix.json, matrix.md and matrix.png here. Default: none."),
    as_json: bool = typer.Option(False, "--json", help="Print the matrix as JSON on stdout instead of its tables; progress to stderr. Default off."),
) -> None:
    """The stress matrix of one repository: per token budget, every length band x concurrency cell on real
    texts of that band (memory, errors by kind, the cosine of every vector against the text embedded alone),
    plus a preemption cell (exit 1 when a short request beside the long text failed or a vector was off)
    and a mixed-traffic cell."""
    from ..measure.matrix import MatrixSpec, markdown, run_matrix
    from ..repository.manifest import read_manifest

    budgets = parse_int_list("max_batch_tokens", max_batch_tokens) or (read_manifest(repo).max_batch_tokens or 16384,)
    spec = MatrixSpec(repo, budgets, concurrency=parse_int_list("concurrency", concurrency) or (1,), bands=parse_bands(only),
                      requests=requests, texts=texts_per_band, corpus=corpus, url=server, out=out_dir,
                      preempt_concurrency=preempt_concurrency, preempt_repeats=preempt_repeats,
                      pools=pools or pool_server is not None, pool_url=pool_server)
    doc = run_matrix(spec, log=lambda m: err.print(m, markup=False))
    sys.stdout.write(json.dumps(doc, indent=2) + "\n" if as_json else markdown(doc))
    if not doc.get("preempt_passed", True):
        err.print("the preemption cell failed: a short request failed beside the long text, or a vector was off "
                  "(its row in the table says which)", markup=False)
        raise typer.Exit(1)


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
    knob: Optional[list[str]] = typer.Option(None, help="Search only this knob; repeatable (front.instances, front.max_queue_delay_us, front.preferred_batch_sizes, front.intra_op_threads, front.run_overhead_tokens, budget.max_batch_tokens, encoder.instances, encoder.max_queue_delay_us, as the repository has them). Default: every knob."),
) -> None:
    """Find the serving configuration with the most throughput whose p99 meets the SLO, with real texts."""
    from ..measure.tune import TuneSpec, tune as run_tune

    spec = TuneSpec(repo, parse_slo(slo_p99_ms), concurrency=parse_int_list("concurrency", concurrency) or (1,), corpus=corpus,
                    budget_min=budget_min, out=out_dir, apply_to=apply_to, url=url, force=force, requests=requests,
                    knobs=tuple(knob) if knob else None)
    run_tune(spec, log=say)


def parse_slo(text: str) -> float | dict[int, float]:
    """'100' -> 100.0; '32=50,512=400' -> {32: 50.0, 512: 400.0}."""
    try:
        if "=" not in text:
            return float(text)
        slo = {}
        for part in text.split(","):
            b, _, ms = part.rpartition("=")
            slo[int(b.strip().lstrip("<="))] = float(ms)
        return slo
    except ValueError:
        raise SpecError(f"invalid --slo-p99-ms {text!r}", "milliseconds (e.g. 100) or BUCKET=MS,... (e.g. 32=50,512=400)") from None


def parse_bands(text: str | None) -> tuple[int, ...] | None:
    """'32,<=2048,mixed' -> (32, 2048): the bands of `matrix --only` (None: every bucket)."""
    items = [x.strip().lstrip("<=") for x in (text or "").split(",") if x.strip() and x.strip() != "mixed"]
    if not all(x.isdigit() for x in items):
        raise SpecError(f"invalid --only {text!r}", "bucket sizes of the repository, e.g. 32,2048")
    return tuple(int(x) for x in items) or None


def parse_cpu_pids(items: list[str]) -> dict[str, int]:
    """['tritonserver=1234'] -> {'tritonserver': 1234}: the process trees `bench --cpu-pid` samples."""
    pids = {}
    for item in items:
        label, sep, pid = item.partition("=")
        if not sep or not label or not pid.isdigit():
            raise SpecError(f"invalid --cpu-pid {item!r}", "LABEL=PID, e.g. --cpu-pid tritonserver=1234")
        pids[label] = int(pid)
    return pids


def parse_options(items: list[str]) -> dict:
    """KEY=VALUE request options, KEY one of the names the served models read (embtrt_backend.options,
    as the gateway reads them); dimensions as an integer."""
    from embtrt_backend.options import OPTION_NAMES

    options: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in OPTION_NAMES:
            raise SpecError(f"invalid --option {item!r}", "KEY=VALUE with KEY one of " + ", ".join(OPTION_NAMES))
        if key == "dimensions" and not value.isdigit():
            raise SpecError(f"invalid --option {item!r}: dimensions takes an integer")
        options[key] = int(value) if key == "dimensions" else value
    return options
