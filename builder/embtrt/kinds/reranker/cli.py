"""`embtrt rerank`: the reranker kind's command, registered on the CLI by the registry (Kind.cli)."""

from __future__ import annotations

import json
import sys
import time
from typing import Optional

import typer

from ...cli.app import app, say


@app.command()
def rerank(
    documents: list[str] = typer.Argument(..., help="Documents to rank against the query."),
    query: str = typer.Option(..., help="The query (required)."),
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address. Default 127.0.0.1:8001."),
    model: str = typer.Option(..., help="The reranker's front door (its --name at build time; required)."),
    top_n: Optional[int] = typer.Option(None, help="Keep the N best documents. Default: all."),
    activation: str = typer.Option("default", help="default (the model's, as CrossEncoder.predict) | raw (logits) | softmax (several labels). Default default."),
    truncate: bool = typer.Option(True, "--truncate/--no-truncate", help="Cut pairs over the max length as CrossEncoder.predict does (--no-truncate: such a pair is an error). Default on."),
    instruction: Optional[str] = typer.Option(None, help="An LLM-style reranker's instruction, put in its prompt template (a model without one refuses it). Default: the template's."),
    as_json: bool = typer.Option(False, "--json", help="Print {model, latency_ms, results: [{index, score, document}]} as JSON. Default off."),
) -> None:
    """Rank documents for a query with a reranker (cross-encoder) over gRPC, best first."""
    from .serve import RerankClient

    with RerankClient(url, model) as c:
        t0 = time.perf_counter()
        ranked = c.rerank(query, documents, top_n, activation=activation, truncate=truncate, instruction=instruction)
        ms = (time.perf_counter() - t0) * 1e3
    if as_json:
        sys.stdout.write(json.dumps({"model": model, "latency_ms": ms,
                                     "results": [{**r, "document": documents[r["index"]]} for r in ranked]}) + "\n")
        return
    say(f"{model}: {len(documents)} documents ranked in {ms:.1f} ms")
    for r in ranked:
        say(f"  {r['score']:+.6f}  [{r['index']}] {documents[r['index']][:70]!r}")


def bench(o) -> None:
    """`embtrt bench --rerank-documents`: the --model targets (and --openai-url peers of the Cohere shape) per
    documents per request and concurrency; in-process CrossEncoder.predict once when --reference is given."""
    from embtrt_backend.kinds.reranker import KIND

    from ...cli.measure_kinds import emit
    from ...common.corpus import load_corpus
    from ...common.options import parse_int_list
    from ...errors import SpecError
    from .measure import bench_reranker

    if not o.models and not o.openai_url:
        raise SpecError("--rerank-documents needs the reranker to measure: --model NAME[@HOST:PORT] or --openai-url")
    if len(o.openai_url) != len(o.openai_model):
        raise SpecError("invalid rerank peers: give one --openai-model per --openai-url")
    texts = load_corpus(o.corpus)
    docs = parse_int_list("rerank_documents", o.picked) or (1, 10, 32, 100)
    conc = parse_int_list("concurrency", o.concurrency) or (1,)
    rows: list[dict] = []
    for i, m in enumerate(o.models):
        name, _, murl = m.partition("@")
        rows += bench_reranker(murl or o.url, name, texts, docs, conc, o.requests, o.warmup,
                               o.reference if o.inprocess and not i else None,   # the in-process line once
                               progress=o.progress(), trust_remote_code=o.trust_remote_code)
    for j, (u, m) in enumerate(zip(o.openai_url, o.openai_model)):   # the in-process line once, here where no --model
        rows += bench_reranker(u, m, texts, docs, conc, o.requests, o.warmup,
                               o.reference if o.inprocess and not o.models and not j else None, progress=o.progress(),
                               trust_remote_code=o.trust_remote_code, http=True)
    emit({"kind": KIND.name, "results": rows}, {"target": "target", "documents": "documents", "conc": "concurrency"},
         "pairs", o.out_dir, o.as_json)
