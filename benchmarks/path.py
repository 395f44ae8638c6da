"""The request path, measured so the figures can be trusted: the working tree against named commits.

    python benchmarks/path.py BASE [BASE2 ...] [--model tiny|minilm] [--rounds 3] [--out DIR]
    (make bench-path BASE=...)

1. A model folder: `tiny` (tests/tiny_models.make_bert_mean_64: 2 layers, 64 wide, MiniLM's
   vocabulary; its encoder costs almost nothing, so what is measured is the path) or `minilm` (the
   bundled all-MiniLM-L6-v2). Each side builds it with its own code and defaults (`embtrt build`,
   as benchmarks/ab.py does; `--variant LABEL=OPTION[,OPTION]` adds working-tree builds with options).
2. Per round (the sides' order rotating), with nothing else served:
   - the floor: a trivial model (embtrt.measure.floor: the front door's signature, no encoder) on its
     own tritonserver, driven by the same generator at concurrency 1 and 64: what the generator can
     drive on this machine. A measured rate over 1/3 of the floor's is marked "generator-bound?";
   - in process, each side's repository's own tokenizer and ONNX (ONNX Runtime fp32, as `embtrt bench
     --ort-repo`): one text at a time (p50) and length-sorted batches of 32 (texts/s), warm (every
     text seen once first), best of three passes;
   - each side served in turn (`embtrt serve`, the working tree's) and driven over gRPC by
     embtrt.measure.loadgen (every request built before the clock starts; --processes): one text per
     request at concurrency 1, 4, 32 and 64 (tritonserver's CPU per request, the batch sizes Triton's
     batcher formed, from its statistics), and 32 texts per request at concurrency 4; the vectors
     of the concurrency-64 cell compared with SentenceTransformer.encode (min cosine).
3. Medians over the rounds with their spread (min-max), the ratios HEAD / each base, the CPU named:
   path.json and path.md under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests")]

import ab  # noqa: E402  (the A/B's trees, builds and served repositories)

from embtrt.measure.floor import FLOOR_MODEL, write_floor  # noqa: E402
from embtrt.measure.loadgen import HEADROOM, Job, run  # noqa: E402
from embtrt.measure.samplers import tree_cpu_seconds  # noqa: E402

SHORT = ROOT / "benchmarks" / "data" / "debian-short-descriptions.txt"
ONE_TEXT = ((1, 1000), (4, 1000), (32, 3000), (64, 3000))   # (concurrency, requests), one text each
BATCHED = (32, 4, 200)                                        # texts per request, concurrency, requests


def model_folder(which: str, work: Path) -> tuple[Path, str]:
    if which == "minilm":
        from embtrt.reference.modelinfo import default_model_path

        return default_model_path(), ab.NAME
    from tiny_models import make_bert_mean_64

    return make_bert_mean_64(work / "tiny-model"), "tiny_path"


def batch_sizes(stats_before: dict, stats_after: dict) -> dict[int, int]:
    """Executions per batch size between two statistics readings of one model."""
    def counts(s: dict) -> dict[int, int]:   # the JSON statistics leave out fields that are 0
        return {int(b["batch_size"]): int(b.get("compute_infer", {}).get("count", 0)) for b in s.get("batch_stats", [])}
    a, b = counts(stats_before), counts(stats_after)
    return {k: v - a.get(k, 0) for k, v in sorted(b.items()) if v - a.get(k, 0)}


def model_stats(grpc_port: int, model: str) -> dict:
    import tritonclient.grpc as g

    c = g.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    try:
        return c.get_inference_statistics(model, as_json=True)["model_stats"][0]
    finally:
        c.close()


def drive(url: str, model: str, payloads: list[tuple[str, ...]], conc: int, n: int, procs: int, keep: bool = False):
    return run(Job(url, model, tuple(payloads), n, conc, procs, "grpc", warmup=min(200, n // 5), keep=keep))


def cell(out, extra: dict | None = None) -> dict:
    if out.errors:
        sys.exit(f"path: {out.errors} failed requests: {out.error_samples[:2]}")
    return {"req_per_s": round(out.req_per_s, 1), "p50_ms": round(out.percentile_ms(50), 3),
            "p99_ms": round(out.percentile_ms(99), 3), "client_busy": round(out.client_busy, 2), **(extra or {})}


def floor_round(texts: list[str], work: Path, procs: int, dim: int) -> dict:
    from embtrt.serve.server import ServerSpec, TritonServer, free_port

    repo = write_floor(work / "floor", dim=dim)   # the model's width: the same bytes back per request
    spec = ServerSpec(repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(), graceful_exit=False)
    out = {}
    with TritonServer(spec) as s:
        one = [(t,) for t in texts]
        for c, n in ((1, 1000), (64, 3000)):
            cpu0 = tree_cpu_seconds(s.proc.pid)
            o = drive(s.grpc_url, FLOOR_MODEL, one, c, n, procs)
            cpu = tree_cpu_seconds(s.proc.pid) - cpu0
            out[f"c{c}"] = cell(o, {"server_cpu_ms_per_req": round(1e3 * cpu / (n + min(200, n // 5)), 3)})
    return out


def in_process(repo: Path, texts: list[str], passes: int = 3) -> dict:
    from embtrt.measure.targets import EncoderInProcess

    line = EncoderInProcess(repo)
    for t in texts:                      # every shape seen once
        line.embed([t])
    singles, batches = [], []
    order = sorted(texts, key=len)
    for _ in range(passes):
        lat = []
        for t in texts[:400]:
            t0 = time.perf_counter()
            line.embed([t])
            lat.append(time.perf_counter() - t0)
        singles.append(1e3 * statistics.median(lat))
        t0 = time.perf_counter()
        for i in range(0, len(order), 32):
            line.embed(order[i:i + 32])
        batches.append(len(order) / (time.perf_counter() - t0))
    return {"single_p50_ms": round(min(singles), 3), "batch32_texts_per_s": round(max(batches), 1)}


def side_round(repo: Path, name: str, texts: list[str], reference: np.ndarray, work: Path, procs: int, log: Path) -> dict:
    one = [(t,) for t in texts]
    out: dict = {}
    with ab.Served(repo, log, model=name) as s:
        url = f"127.0.0.1:{s.grpc}"
        for conc, n in ONE_TEXT:
            before, cpu0 = model_stats(s.grpc, name), tree_cpu_seconds(s.proc.pid)
            o = drive(url, name, one, conc, n, procs, keep=conc == 64)
            cpu1, after = tree_cpu_seconds(s.proc.pid), model_stats(s.grpc, name)
            served = int(after["inference_stats"]["success"].get("count", 0)) - \
                int(before["inference_stats"]["success"].get("count", 0))
            extra = {"server_cpu_ms_per_req": round(1e3 * (cpu1 - cpu0) / max(served, 1), 3),
                     "batch_sizes": batch_sizes(before, after)}
            if conc == 64:
                got = np.stack([o.outputs[i][0] for i in sorted(o.outputs)])
                want = reference[[i % len(texts) for i in sorted(o.outputs)]]
                cos = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
                extra["min_cosine_under_load"] = round(float(cos.min()), 7)
                extra["vectors_compared"] = len(o.outputs)
            out[f"c{conc}"] = cell(o, extra)
        per, conc, n = BATCHED
        batched = [tuple(texts[(i * per + j) % len(texts)] for j in range(per)) for i in range(n)]
        o = drive(url, name, batched, conc, n, procs)
        out[f"b{per}c{conc}"] = {**cell(o), "texts_per_s": round(o.req_per_s * per, 1)}
    return out


def spread(values: list[float], fmt: str = ".3f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def report(doc: dict) -> str:
    sides = list(doc["sides"])
    lines = [f"# The request path: {doc['model']} ({doc['name']}), HEAD (working tree) against "
             + ", ".join(f"{b} ({c[:10]})" for b, c in doc["bases"].items()),
             "", f"cpu: {doc['cpu']}; {doc['rounds']} rounds; generator processes {doc['processes']}; gRPC; "
             f"date {doc['date']}", f"command: `{doc['command']}`", "",
             "Medians over the rounds, (min-max) in brackets.", "",
             "| figure | " + " | ".join(sides) + " |", "|---|" + "---|" * len(sides)]

    def row(label: str, get, fmt: str = ".3f") -> None:
        vals = []
        for side in sides:
            try:
                vals.append(spread([float(get(r)) for r in doc["sides"][side]], fmt))
            except (KeyError, TypeError):
                vals.append("-")
        lines.append(f"| {label} | " + " | ".join(vals) + " |")

    row("in process: one text p50 ms", lambda r: r["inprocess"]["single_p50_ms"])
    row("in process: batches of 32, texts/s", lambda r: r["inprocess"]["batch32_texts_per_s"], ".0f")
    for conc, _ in ONE_TEXT:
        row(f"served c{conc}: p50 ms", lambda r, c=conc: r["served"][f"c{c}"]["p50_ms"])
        row(f"served c{conc}: p99 ms", lambda r, c=conc: r["served"][f"c{c}"]["p99_ms"])
        row(f"served c{conc}: req/s", lambda r, c=conc: r["served"][f"c{c}"]["req_per_s"], ".0f")
        row(f"served c{conc}: tritonserver CPU ms/req", lambda r, c=conc: r["served"][f"c{c}"]["server_cpu_ms_per_req"])
    per, conc, _ = BATCHED
    row(f"served {per} texts/request c{conc}: texts/s", lambda r: r["served"][f"b{per}c{conc}"]["texts_per_s"], ".0f")
    row("c64: min cosine vs SentenceTransformer.encode", lambda r: r["served"]["c64"]["min_cosine_under_load"], ".7f")
    lines += ["", "Batch sizes Triton's batcher formed (executions per size, last round):", ""]
    for side in sides:
        last = doc["sides"][side][-1]["served"]
        lines.append(f"- {side}: c32 {last['c32']['batch_sizes']}; c64 {last['c64']['batch_sizes']}")
    floor = doc["floor"]
    lines += ["", "The floor (a trivial model, same generator): c1 p50 "
              + spread([f["c1"]["p50_ms"] for f in floor]) + " ms, c64 " + spread([f["c64"]["req_per_s"] for f in floor])
              + " req/s."]
    fl = statistics.median([f["c64"]["req_per_s"] for f in floor])
    for side in sides:
        r64 = statistics.median([r["served"]["c64"]["req_per_s"] for r in doc["sides"][side]])
        verdict = "not the limit" if fl >= HEADROOM * r64 else "generator-bound? (the floor is under 3x: the generator " \
                  "and the server share these cores)"
        lines.append(f"- {side}: c64 {r64:.0f} req/s = {r64 / fl:.2f} of the floor: {verdict}")
    lines += ["", "Ratios HEAD / base (medians):", ""]
    for b in sides[1:]:
        def med(side, get):
            return statistics.median([float(get(r)) for r in doc["sides"][side]])
        for label, get in (("c1 p50 above the in-process floor", lambda r: r["served"]["c1"]["p50_ms"] - r["inprocess"]["single_p50_ms"]),
                           ("c64 tritonserver CPU ms/req", lambda r: r["served"]["c64"]["server_cpu_ms_per_req"]),
                           ("c64 req/s", lambda r: r["served"]["c64"]["req_per_s"])):
            h, o = med("head", get), med(b, get)
            lines.append(f"- {label}: head {h:.3f}, {b} {o:.3f}: {h / o:.3f}x")
    for side in sides:
        def med2(get, s=side):
            return statistics.median([float(get(r)) for r in doc["sides"][s]])
        p50 = med2(lambda r: r["served"]["c1"]["p50_ms"])
        single = med2(lambda r: r["inprocess"]["single_p50_ms"])
        c32 = med2(lambda r: r["served"]["c32"]["req_per_s"])
        b32 = med2(lambda r: r["inprocess"]["batch32_texts_per_s"])
        lines.append(f"- {side}: c1 p50 / in-process one text = {p50 / single:.2f}x; c32 req/s / in-process "
                     f"batch-32 texts/s = {c32 / b32:.2f}x")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", nargs="*", help="commit(s) to compare the working tree against")
    ap.add_argument("--model", choices=("tiny", "minilm"), default="tiny")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=1, help="load generator processes. Default 1 (2 cores here).")
    ap.add_argument("--variant", action="append", default=[], type=ab.parse_variant,
                    help="LABEL=OPTION[,OPTION]: a working-tree build with these options. Repeatable.")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="embtrt-path-"))
    try:
        folder, name = model_folder(args.model, work)
        texts = [t.strip() for t in SHORT.read_text().splitlines() if t.strip()]
        from sentence_transformers import SentenceTransformer

        reference = SentenceTransformer(str(folder), device="cpu").encode(texts, batch_size=64)
        trees, options, bases = {"head": ROOT}, {"head": []}, {}
        for b in args.base:
            trees[b] = work / f"tree-{len(trees)}"
            bases[b] = ab.unpack(b, trees[b])
            options[b] = []
        for label, opts in args.variant:
            trees[label], options[label] = ROOT, opts
        repos = {side: work / f"repo-{i}" for i, side in enumerate(trees)}
        for side in trees:
            print(f"== building {folder.name} with {side}'s code {' '.join(options[side])}", flush=True)
            ab.build(trees[side], repos[side], [str(folder), "--name", name, *options[side]], work / f"build-{side}.log")
        order = list(trees)
        doc: dict = {"model": args.model, "name": name, "bases": bases, "variants": dict(args.variant), "cpu": ab.cpu_name(),
                     "rounds": args.rounds, "processes": args.processes,
                     "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "command": " ".join(["python benchmarks/path.py", *args.base, f"--model {args.model}",
                                          f"--rounds {args.rounds}", f"--processes {args.processes}",
                                          *[f"--variant {k}={','.join(v)}" for k, v in args.variant]]),
                     "floor": [], "sides": {s: [] for s in order}}
        for r in range(args.rounds):
            doc["floor"].append(floor_round(texts, work / f"floor-{r}", args.processes, int(reference.shape[1])))
            print(f"round {r + 1} floor: {doc['floor'][-1]}", flush=True)
            for side in order[r % len(order):] + order[:r % len(order)]:
                rec = {"inprocess": in_process(repos[side], texts),
                       "served": side_round(repos[side], name, texts, reference, work, args.processes,
                                            work / f"serve-{side}-{r}.log")}
                doc["sides"][side].append(rec)
                s = rec["served"]
                print(f"round {r + 1} {side}: in process {rec['inprocess']}; c1 p50 {s['c1']['p50_ms']} ms, c64 "
                      f"{s['c64']['req_per_s']} req/s, {s['c64']['server_cpu_ms_per_req']} CPU ms/req", flush=True)
        text = report(doc)
        print(text)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "path.json").write_text(json.dumps(doc, indent=2) + "\n")
            (args.out / "path.md").write_text(text)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
