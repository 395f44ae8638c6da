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
