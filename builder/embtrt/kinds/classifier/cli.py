"""`embtrt classify`: the classifier kind's command, registered on the CLI by the registry (Kind.cli)."""

from __future__ import annotations

import json
import sys
import time
from typing import Optional

import typer

from ...cli.app import app, say


@app.command()
def classify(
    texts: list[str] = typer.Argument(..., help="Texts to classify."),
    pair: Optional[list[str]] = typer.Option(None, help="The second text of each text's pair, in order (repeat once per text). Default: single texts."),
    url: str = typer.Option("127.0.0.1:8001", help="Triton gRPC address. Default 127.0.0.1:8001."),
    model: str = typer.Option(..., help="The classifier's front door (its --name at build time; required)."),
    top_k: Optional[int] = typer.Option(None, help="Labels to show per text (the best K). Default: all."),
    activation: str = typer.Option("default", help="default (softmax over several labels; sigmoid for one label or a multi-label model, as transformers' pipeline) | raw (logits) | softmax | sigmoid. Default default."),
    as_json: bool = typer.Option(False, "--json", help="Print {model, latency_ms, results: [[{label, score}]]} as JSON. Default off."),
) -> None:
    """Classify texts (or text pairs) with a sequence classifier over gRPC: each label's score, best first."""
    from .serve import ClassifyClient

    with ClassifyClient(url, model) as c:
        t0 = time.perf_counter()
        results = c.classify(texts, pair or None, top_k, activation=activation)
        ms = (time.perf_counter() - t0) * 1e3
    if as_json:
        sys.stdout.write(json.dumps({"model": model, "latency_ms": ms, "results": results}) + "\n")
        return
    say(f"{model}: {len(texts)} texts classified in {ms:.1f} ms")
    for t, labels in zip(texts, results):
        say("  " + ", ".join(f"{x['label']} {x['score']:.4f}" for x in labels) + f"  {t[:50]!r}")


def bench(o) -> None:
    """`embtrt bench --classify`: the --model targets at each concurrency, and in-process transformers on the same
    texts when --reference is given."""
    from embtrt_backend.kinds.classifier import KIND

    from ...cli.measure_kinds import emit
    from ...common.corpus import load_corpus
    from ...common.options import parse_int_list
    from .measure import TRIAL_TEXTS, bench_classifier

    o.require_models("--classify", "the classifier")
    o.require_reference("--classify", "in-process transformers")
    rows = bench_classifier(o.url, list(o.models), load_corpus(o.corpus), parse_int_list("concurrency", o.concurrency) or (1,),
                            o.texts_per_request if o.texts_per_request > 1 else TRIAL_TEXTS, o.requests, o.warmup,
                            o.reference if o.inprocess else None, progress=o.progress(), trust_remote_code=o.trust_remote_code)
    emit({"kind": KIND.name, "results": rows},
         {"target": "target", "conc": "concurrency", "texts/request": "texts_per_request"}, "texts", o.out_dir, o.as_json)
