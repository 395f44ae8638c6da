"""The reranker paths of `embtrt verify` and `embtrt bench` (each kind's measure module): glue only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from embtrt_backend.kinds import CLASSIFIER, RERANKER, kind_of

from ..common.options import parse_int_list
from ..errors import SpecError, require_extra
from ..reference.verdict import Verdict
from .app import err, out


def verify_reranker_cli(url: str, model: str, reference: Path | None, corpus: Path | None, under_load: bool,
                        concurrency: int, against: str | None, log, kind: str = RERANKER.name,
                        trust_remote_code: bool = False) -> Verdict:
    """verify on a reranker (or, kind sparse, a sparse encoder): the kind's gate on the deployment, its verdict."""
    from ..common.corpus import load_corpus
    from ..common.plugins import implementation

    other = None
    if against is not None:
        other_url, _, other_model = against.partition("/")
        other = (other_url, other_model or model)
    elif reference is None:
        raise SpecError(f"{model} is a {kind}: its gate needs the {kind_of(kind).reference} folder it was built from",
                        "pass --reference MODEL_DIR (or --against HOST:PORT[/MODEL] to gate two deployments)")
    else:
        require_extra("build", "verify", "torch", "transformers", "sentence_transformers")
    run = implementation(kind_of(kind), "verify")
    return run(url, model, reference, load_corpus(corpus), under_load=under_load, concurrency=concurrency,
               against=other, log=log, trust_remote_code=trust_remote_code)


def _emit(doc: dict, lead: dict[str, str], unit: str, out_dir: Path | None, as_json: bool) -> None:
    """A bench document: results.json and results.md (kind_measure.markdown) into --out, and JSON or the table on stdout."""
    from ..measure.kind_measure import markdown

    table = markdown(doc["results"], lead, unit)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
        (out_dir / "results.md").write_text(table)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.print(table, markup=False)


def bench_reranker_cli(url: str, models: list[str], reference: Path | None, corpus: Path | None, documents: str,
                       concurrency: str, requests: int, warmup: int, inprocess: bool, out_dir: Path | None,
                       as_json: bool, http_urls: tuple[str, ...] | list[str] = (),
                       http_models: tuple[str, ...] | list[str] = (), trust_remote_code: bool = False) -> None:
    from ..common.corpus import load_corpus
    from ..kinds.reranker.measure import bench_reranker

    if not models and not http_urls:
        raise SpecError("--rerank-documents needs the reranker to measure: --model NAME[@HOST:PORT] or --openai-url")
    if len(http_urls) != len(http_models):
        raise SpecError("invalid rerank peers: give one --openai-model per --openai-url")
    texts = load_corpus(corpus)
    docs = parse_int_list("rerank_documents", documents) or (1, 10, 32, 100)
    conc = parse_int_list("concurrency", concurrency) or (1,)
    rows: list[dict] = []
    progress = lambda msg: err.print(msg, markup=False)
    for i, m in enumerate(models):
        name, _, murl = m.partition("@")
        rows += bench_reranker(murl or url, name, texts, docs, conc, requests, warmup, reference if inprocess and not i else None,
                               progress=progress, trust_remote_code=trust_remote_code)   # the in-process line once
    for j, (u, m) in enumerate(zip(http_urls, http_models)):   # the in-process line once, here where no --model
        rows += bench_reranker(u, m, texts, docs, conc, requests, warmup,
                               reference if inprocess and not models and not j else None, progress=progress,
                               trust_remote_code=trust_remote_code, http=True)
    _emit({"kind": RERANKER.name, "results": rows}, {"target": "target", "documents": "documents", "conc": "concurrency"},
          "pairs", out_dir, as_json)


def bench_sparse_cli(url: str, models: list[str], reference: Path | None, corpus: Path | None, buckets: str,
                     only: str | None, concurrency: str, texts_per_request: int, requests: int, warmup: int,
                     inprocess: bool, input_type: str, out_dir: Path | None, as_json: bool,
                     trust_remote_code: bool = False) -> None:
    """bench on sparse encoders: the --model targets per length scenario and concurrency, and
    in-process SparseEncoder (batch 32) on the same texts when --reference is given."""
    from ..common.corpus import load_corpus
    from ..kinds.sparse.measure_bench import bench_sparse

    if not models:
        raise SpecError("--sparse needs the sparse encoder to measure: --model NAME[@HOST:PORT]")
    if input_type not in ("query", "document"):
        raise SpecError(f"invalid input_type {input_type!r} for --sparse", "query or document")
    if inprocess and reference is None:
        raise SpecError("--sparse measures in-process SparseEncoder beside the served model: pass --reference "
                        "SPLADE_DIR (the folder it was built from), or --no-inprocess")
    if inprocess:
        require_extra("build", "bench --sparse", "torch", "transformers", "sentence_transformers")
    doc = bench_sparse(url, models, load_corpus(corpus), edges=parse_int_list("buckets", buckets) or (32, 128, 256),
                       only=tuple(x for x in (only or "").split(",") if x),
                       concurrency=parse_int_list("concurrency", concurrency) or (1,), per_request=texts_per_request,
                       requests=requests, warmup=warmup, input_type=input_type,
                       reference=reference if inprocess else None, progress=lambda m: err.print(m, markup=False),
                       trust_remote_code=trust_remote_code)
    _emit(doc, {"target": "target", "scenario": "scenario", "conc": "concurrency", "texts/request": "texts_per_request"},
          "texts", out_dir, as_json)


def bench_classifier_cli(url: str, models: list[str], reference: Path | None, corpus: Path | None, concurrency: str,
                         texts_per_request: int, requests: int, warmup: int, inprocess: bool, out_dir: Path | None,
                         as_json: bool, trust_remote_code: bool = False) -> None:
    """bench on classifiers: the --model targets at each concurrency, and in-process transformers on the same
    texts when --reference is given."""
    from ..common.corpus import load_corpus
    from ..kinds.classifier.measure import TRIAL_TEXTS, bench_classifier

    if not models:
        raise SpecError("--classify needs the classifier to measure: --model NAME[@HOST:PORT]")
    if inprocess and reference is None:
        raise SpecError("--classify measures in-process transformers beside the served model: pass --reference "
                        "MODEL_DIR (the folder it was built from), or --no-inprocess")
    rows = bench_classifier(url, models, load_corpus(corpus), parse_int_list("concurrency", concurrency) or (1,),
                            texts_per_request if texts_per_request > 1 else TRIAL_TEXTS, requests, warmup,
                            reference if inprocess else None, progress=lambda m: err.print(m, markup=False),
                            trust_remote_code=trust_remote_code)
    _emit({"kind": CLASSIFIER.name, "results": rows},
          {"target": "target", "conc": "concurrency", "texts/request": "texts_per_request"}, "texts", out_dir, as_json)


def bench_images_cli(url: str, models: list[str], reference: Path | None, folder: Path, concurrency: str, per_request: int,
                     requests: int, warmup: int, inprocess: bool, out_dir: Path | None, as_json: bool,
                     trust_remote_code: bool = False) -> None:
    """bench on text-and-image models: the --model targets at each concurrency on the folder's images, and
    in-process SentenceTransformer.encode of the same images when --reference is given."""
    from embtrt_backend.kinds import MULTIMODAL

    from ..kinds.multimodal.measure_bench import bench_images, image_files

    if not models:
        raise SpecError("--images needs the text-and-image model to measure: --model NAME[@HOST:PORT]")
    if inprocess and reference is None:
        raise SpecError("--images measures in-process SentenceTransformer.encode beside the served model: pass "
                        "--reference MODEL_DIR (the folder it was built from), or --no-inprocess")
    rows = bench_images(url, models, image_files(folder), parse_int_list("concurrency", concurrency) or (1,), per_request,
                        requests, warmup, reference if inprocess else None, progress=lambda m: err.print(m, markup=False),
                        trust_remote_code=trust_remote_code)
    _emit({"kind": MULTIMODAL.name, "results": rows},
          {"target": "target", "conc": "concurrency", "images/request": "images_per_request"}, "images", out_dir, as_json)
