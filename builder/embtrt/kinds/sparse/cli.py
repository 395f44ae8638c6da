"""`embtrt sparse`: the sparse kind's command, registered on the CLI by the registry (Kind.cli)."""

from __future__ import annotations

import json
import sys
import time
from typing import Optional

import typer

from ...cli.app import app, say


@app.command()
def sparse(
    texts: list[str] = typer.Argument(..., help="Texts to encode."),
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address. Default 127.0.0.1:8001."),
    model: str = typer.Option(..., help="The sparse encoder's front door (its --name at build time; required)."),
    input_type: Optional[str] = typer.Option(None, help="query (SparseEncoder.encode_query) | document / passage (encode_document). Default: none (no prompt)."),
    max_active_dims: Optional[int] = typer.Option(None, help="Keep each vector's K largest weights. Default: every active dimension."),
    top: int = typer.Option(8, help="Dimensions to print per text (the largest). Default 8."),
    as_json: bool = typer.Option(False, "--json", help="Print {model, latency_ms, vectors: [{indices, values}]} as JSON. Default off."),
) -> None:
    """Encode texts with a sparse encoder (SPLADE) over gRPC: each text's active dimensions."""
    from .serve import SparseClient

    with SparseClient(url, model) as c:
        t0 = time.perf_counter()
        vecs = c.encode(texts, input_type=input_type, max_active_dims=max_active_dims)
        ms = (time.perf_counter() - t0) * 1e3
    if as_json:
        sys.stdout.write(json.dumps({"model": model, "latency_ms": ms, "vectors": [
            {"indices": ix.tolist(), "values": v.tolist()} for ix, v in vecs]}) + "\n")
        return
    say(f"{model}: {len(texts)} texts in {ms:.1f} ms")
    for t, (ix, v) in zip(texts, vecs):
        best = sorted(zip(v.tolist(), ix.tolist()), reverse=True)[:top]
        say(f"  {len(ix)} active  " + ", ".join(f"{i}:{w:.3f}" for w, i in best) + f"  {t[:50]!r}")


def bench(o) -> None:
    """`embtrt bench --sparse`: the --model targets per length scenario and concurrency, and in-process
    SparseEncoder (batch 32) on the same texts when --reference is given."""
    from ...cli.measure_kinds import emit
    from ...common.corpus import load_corpus
    from ...common.options import parse_int_list
    from ...errors import SpecError, require_extra
    from .measure_bench import bench_sparse

    input_type = dict(o.options).get("input_type", "document")
    o.require_models("--sparse", "the sparse encoder")
    if input_type not in ("query", "document"):
        raise SpecError(f"invalid input_type {input_type!r} for --sparse", "query or document")
    o.require_reference("--sparse", "in-process SparseEncoder", "SPLADE_DIR")
    if o.inprocess:
        require_extra("build", "bench --sparse", "torch", "transformers", "sentence_transformers")
    doc = bench_sparse(o.url, list(o.models), load_corpus(o.corpus), edges=parse_int_list("buckets", o.buckets) or (32, 128, 256),
                       only=tuple(x for x in (o.only or "").split(",") if x),
                       concurrency=parse_int_list("concurrency", o.concurrency) or (1,), per_request=o.texts_per_request,
                       requests=o.requests, warmup=o.warmup, input_type=input_type,
                       reference=o.reference if o.inprocess else None, progress=o.progress(),
                       trust_remote_code=o.trust_remote_code)
    emit(doc, {"target": "target", "scenario": "scenario", "conc": "concurrency", "texts/request": "texts_per_request"},
         "texts", o.out_dir, o.as_json)
