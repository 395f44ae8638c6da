"""`embtrt encode`: the multivector kind's command, registered on the CLI by the registry (Kind.cli)."""

from __future__ import annotations

import json
import sys
import time

import typer

from ...cli.app import app, say


@app.command()
def encode(
    texts: list[str] = typer.Argument(..., help="Texts to encode."),
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address. Default 127.0.0.1:8001."),
    model: str = typer.Option(..., help="The multi-vector encoder's front door (its --name at build time; required)."),
    input_type: str = typer.Option("document", help="query (MultiVectorEncoder.encode_query) | document (encode_document). Default document."),
    dense: bool = typer.Option(False, "--dense", help="bge-m3: also its dense vectors (dense_vecs). Default off."),
    lexical: bool = typer.Option(False, "--sparse", help="bge-m3: also its lexical weights (lexical_weights). Default off."),
    as_json: bool = typer.Option(False, "--json", help="Print {model, latency_ms, colbert_vecs, dense_vecs?, lexical_weights?} as JSON. Default off."),
) -> None:
    """Encode texts with a multi-vector encoder (ColBERT, bge-m3) over gRPC: each text's token vectors (and
    bge-m3's dense vector and lexical weights, from the same pass)."""
    from .serve import MultiVectorClient

    with MultiVectorClient(url, model) as c:
        t0 = time.perf_counter()
        if dense or lexical:
            out = c.encode(texts, return_dense=dense, return_sparse=lexical, return_colbert_vecs=True)
        else:
            out = {"colbert_vecs": c.token_vectors(texts, input_type=input_type)}
        ms = (time.perf_counter() - t0) * 1e3
    vecs = out["colbert_vecs"]
    if as_json:
        doc = {"model": model, "latency_ms": ms, "colbert_vecs": [v.tolist() for v in vecs]}
        if dense:
            doc["dense_vecs"] = out["dense_vecs"].tolist()
        if lexical:
            doc["lexical_weights"] = out["lexical_weights"]
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    say(f"{model}: {len(texts)} texts in {ms:.1f} ms")
    for i, (t, v) in enumerate(zip(texts, vecs)):
        extra = f", {len(out['lexical_weights'][i])} lexical weights" if lexical else ""
        say(f"  {len(v)} vectors of {v.shape[1] if len(v) else 0}{extra}  {t[:50]!r}")
