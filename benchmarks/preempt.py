"""Long texts beside short load on one tritonserver, over gRPC to the front door: #54's case, measured.

    .venv/bin/python benchmarks/preempt.py [--runs 10] [--longs 4] [--short-clients 64] [--gate on|off] [--out DIR]

Builds tests/tiny_models.py's 16K-position model (a tiny BERT, 16,384 tokens, MiniLM's tokenizer)
with 16K-, 12K- and 5K-token texts in its gate corpus, serves it with `embtrt serve`, and per run:
SHORT_CLIENTS asyncio gRPC clients send one short corpus text per request without pause, and after
1 s LONGS texts of 16,383 tokens are sent at once, each by its own client that retries an
UNAVAILABLE refusal after 0.5 s (as EmbeddingClient or the gateway would). The run ends when every
long text is back. Reported per run: short requests sent / failed (any error) and their p50 / p99
latency, long requests' refusals and their cosine against sentence-transformers (the unloaded
reference). `--gate off` serves a copy of the repository whose front door has long_row_tokens
1,000,000,000 (no long-row slots: the behaviour before the reserve rule) for an A/B on one build.
Prints a table and writes preempt.json. Loopback only; bounded (a run gives up after 300 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "builder"), str(ROOT / "tests")]


def _p(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q)) if xs else float("nan")


async def one_run(url: str, name: str, shorts: list[str], long_text: str, ref: np.ndarray, longs: int,
                  clients: int) -> dict:
    import tritonclient.grpc.aio as aio
    from tritonclient.utils import InferenceServerException

    from embtrt.serve.wire import text_input

    stop = asyncio.Event()
    lat: list[float] = []
    errors: list[str] = []
    done_at: list[list[float]] = [[] for _ in range(clients)]   # each short client's answers, when they came

    async def short_client(k: int) -> None:
        c, i = aio.InferenceServerClient(url), k
        try:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    await c.infer(name, [text_input([shorts[i % len(shorts)]])], client_timeout=60)
                    lat.append(time.monotonic() - t0)
                    done_at[k].append(time.monotonic())
                except InferenceServerException as exc:
                    errors.append(f"{exc.status()}: {str(exc)[:160]}")
                i += 1
        finally:
            await c.close()

    async def long_client() -> tuple[np.ndarray, int, float]:
        c, refused, t0 = aio.InferenceServerClient(url), 0, time.monotonic()
        try:
            while True:
                try:
                    r = await c.infer(name, [text_input([long_text])], client_timeout=280)
                    return r.as_numpy("EMBEDDING")[0], refused, time.monotonic() - t0
                except InferenceServerException as exc:
                    if "UNAVAILABLE" not in str(exc.status()):
                        raise
                    refused += 1
                    await asyncio.sleep(0.5)
        finally:
            await c.close()

    load = [asyncio.create_task(short_client(k)) for k in range(clients)]
    for _ in range(6000):   # until every short client has had an answer (at most 60 s): the load is on
        if all(done_at) or errors:
            break
        await asyncio.sleep(0.01)
    t0 = time.monotonic()
    try:
        got = await asyncio.wait_for(asyncio.gather(*[long_client() for _ in range(longs)]), 300)
    finally:
        stop.set()
        await asyncio.gather(*load)
    secs = time.monotonic() - t0
    first_long = t0 + min(g[2] for g in got)
    # starvation shows as clients with no answer while the long texts ran: each should have had several
    during = [sum(t0 < t < first_long for t in d) for d in done_at]
    # and the answers kept coming: each tenth of that span (it scales with the machine) had some
    tenths = np.histogram([t for d in done_at for t in d], bins=10, range=(t0, first_long))[0]
    vecs = np.stack([g[0] for g in got])
    cos = (vecs @ ref) / (np.linalg.norm(vecs, axis=1) * np.linalg.norm(ref))
    return {"short_sent": len(lat) + len(errors), "short_failed": len(errors), "short_errors": sorted(set(errors))[:3],
            "short_p50_ms": round(_p(lat, 50), 1), "short_p99_ms": round(_p(lat, 99), 1),
            "short_max_ms": round(_p(lat, 100), 1), "long_refusals": sum(g[1] for g in got),
            "long_seconds": [round(g[2], 1) for g in got], "long_cos_min": round(float(cos.min()), 6),
            "seconds": round(secs, 1), "short_clients": clients,
            "short_clients_answered_during_long": sum(n > 0 for n in during),
            "short_answers_during_long_min": min(during, default=0),
            "long_span_tenths_without_short_answers": int((tenths == 0).sum())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--longs", type=int, default=4)
    ap.add_argument("--short-clients", type=int, default=64)
    ap.add_argument("--gate", choices=("on", "off"), default="on")
    ap.add_argument("--work", type=Path, default=None, help="a folder kept between invocations (model, build)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from embtrt.common.corpus import load_corpus
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options
    from embtrt.reference.torch_ref import st_embed
    from serve_run import start_serve
    from tiny_models import long_texts, make_bert_16k

    work = args.work or Path(tempfile.mkdtemp(prefix="embtrt-preempt-"))
    model, repo = work / "b16k", work / "repo"
    if not (repo / "embtrt.json").exists():
        make_bert_16k(model)
        corpus = work / "corpus.json"
        corpus.write_text(json.dumps(load_corpus() + long_texts(model / "tokenizer.json")))
        build(spec_from_options(model, repo), corpus=corpus, log=print)
    long_text = long_texts(model / "tokenizer.json", (16383,))[0]
    ref = st_embed(model, [long_text], batch_size=1)[0]
    served = repo
    if args.gate == "off":
        served = work / "repo-gate-off"
        shutil.rmtree(served, ignore_errors=True)
        shutil.copytree(repo, served, symlinks=True)
        cfg = served / "b16k" / "config.pbtxt"
        text = cfg.read_text()
        text = re.sub(r'(parameters\s*\{\s*key:\s*"long_row_tokens".*?string_value:\s*")\d+', r"\g<1>1000000000", text,
                      flags=re.S) if "long_row_tokens" in text else text + \
            '\nparameters { key: "long_row_tokens" value: { string_value: "1000000000" } }\n'
        cfg.write_text(text)
    shorts = [t for t in load_corpus() if len(t) < 120][:200]
    serve, url, _log = start_serve(served, work, "--probe-interval", "0")
    doc = {"cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "),
           "cores": os.cpu_count(), "gate": args.gate, "longs": args.longs, "short_clients": args.short_clients,
           "command": " ".join(["benchmarks/preempt.py", *sys.argv[1:]]), "runs": []}
    try:
        for k in range(args.runs):
            r = asyncio.run(one_run(url, "b16k", shorts, long_text, ref, args.longs, args.short_clients))
            doc["runs"].append(r)
            print(f"run {k + 1}: short {r['short_sent']} sent, {r['short_failed']} failed, p50 {r['short_p50_ms']} ms, "
                  f"p99 {r['short_p99_ms']} ms, max {r['short_max_ms']} ms; long: {r['long_refusals']} refusals, "
                  f"done in {r['long_seconds']} s, cos min {r['long_cos_min']}" +
                  (f"; errors {r['short_errors']}" if r["short_errors"] else ""), flush=True)
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
    runs = doc["runs"]
    doc["summary"] = {"short_failed": sum(r["short_failed"] for r in runs),
                      "short_p99_ms_max": max(r["short_p99_ms"] for r in runs) if runs else None,
                      "long_cos_min": min(r["long_cos_min"] for r in runs) if runs else None}
    print(json.dumps(doc["summary"]))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"preempt-gate-{args.gate}.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
