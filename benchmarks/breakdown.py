"""One request taken apart: where a served request's time goes, stage by stage, on this machine.

    python benchmarks/breakdown.py [BASE] [--model tiny|minilm] [--rounds 3] [--out DIR]

The model (benchmarks/path.py's `tiny` or `minilm`) is built by the working tree with `--stage-timers` (the
front door's own timers, embtrt_backend.stages, exported as Triton metrics) and, given BASE, by BASE's code
as it was (no timers: Triton's statistics split it coarser). Each is served in turn and driven over gRPC by
embtrt.measure.loadgen with one short text per request at concurrency 1 (latency) and 64 (time per
request under load); the floor model (no encoder) gives the client, gRPC, Triton frontend and stub hop
that every request pays whatever the model. Per request, from the client's mean latency down:

    client + gRPC + Triton's frontend   the client's mean latency less Triton's request time (statistics)
    queue                               Triton's queue (the dynamic batcher's wait)
    stub in / stub out                  compute_input / compute_output: the Python stub's hop in and out
    read, parse, tokenize, plan, pad,   the front door's own stages (embtrt_backend.stages)
      encode, pool, finish, respond
    stub other                          compute_infer less the stages: the stub's own work around execute()

Writes breakdown.json, breakdown.md and breakdown.png (stacked bars) under --out.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import ab  # noqa: E402
import path as pathbench  # noqa: E402

from embtrt.measure.loadgen import Job, run_rounds  # noqa: E402
from embtrt_backend.stages import STAGES  # noqa: E402

TRITON = ("queue", "compute_input", "compute_infer", "compute_output")


def stage_metrics(metrics_url: str, model: str) -> dict[str, float]:
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    out: dict[str, float] = {}
    for m in re.finditer(r'^embtrt_frontdoor_(\w+)_total\{model="%s"(?:,stage="(\w+)")?\} ([0-9.e+-]+)' % re.escape(model),
                         text, re.M):
        out[m.group(2) or m.group(1)] = float(m.group(3))
    return out


def triton_ns(stats: dict) -> dict[str, int]:
    """Per request sums (each request of a batch is charged its batch's whole compute time) and, from the
    batch statistics, per execution sums."""
    def n(d: dict, key: str) -> int:   # the JSON statistics leave out fields that are 0
        return int(d.get(key, 0))

    s = stats.get("inference_stats", {})
    out = {"count": n(s.get("success", {}), "count"), "request": n(s.get("success", {}), "ns"),
           **{k: n(s.get(k, {}), "ns") for k in TRITON}}
    bs = stats.get("batch_stats", [])
    out["executions"] = sum(n(b.get("compute_infer", {}), "count") for b in bs)
    for k in ("compute_input", "compute_infer", "compute_output"):
        out[f"exec_{k}"] = sum(n(b.get(k, {}), "ns") for b in bs)
    return out


def measure(url: str, model: str, texts: list[str], conc: int, n: int, rounds: int, grpc_port: int,
            metrics_url: str | None) -> dict:
    """Per request means over the measured rounds: client latency, Triton's split, the front door's stages."""
    before_t = triton_ns(pathbench.model_stats(grpc_port, model))
    before_s = stage_metrics(metrics_url, model) if metrics_url else {}
    warm = min(200, n // 5)
    outs = run_rounds(Job(url, model, tuple((t,) for t in texts), n, conc, 1, "grpc", warmup=warm), rounds)
    time.sleep(0.5)   # the stage metrics are pushed every 0.2 s (embtrt_backend.stages.TritonMetrics)
    after_t = triton_ns(pathbench.model_stats(grpc_port, model))
    after_s = stage_metrics(metrics_url, model) if metrics_url else {}
    served = after_t["count"] - before_t["count"]
    per = {k: (after_t[k] - before_t[k]) / served / 1e3 for k in ("request", *TRITON)}   # us per request
    executions = max(after_t["executions"] - before_t["executions"], 1)
    per_exec = {k: (after_t[f"exec_{k}"] - before_t[f"exec_{k}"]) / executions / 1e3
                for k in ("compute_input", "compute_infer", "compute_output")}
    lat = [s for o in outs for s in o.latencies_s]
    rec = {"concurrency": conc, "requests": len(lat), "served": served,
           "client_mean_us": 1e6 * statistics.fmean(lat), "client_p50_us": 1e6 * statistics.median(lat),
           "req_per_s": statistics.median(o.req_per_s for o in outs), "triton_us": per,
           "executions": executions, "batch_mean": served / executions, "per_execution_us": per_exec}
    if after_s:
        ex = max(after_s["executions"] - before_s.get("executions", 0), 1)
        rec["stages_per_execution_us"] = {s: 1e6 * (after_s.get(s, 0) - before_s.get(s, 0)) / ex for s in STAGES}
    return rec


def split(rec: dict) -> dict[str, float]:
    """The mean request's parts (us). At concurrency 1 (one request per execution) from the client down,
    summing to the client's mean latency. Under load, the work per request: each execution's parts divided
    by the requests in it (a request's wait in the queue and for its batch's other requests left out)."""
    t, e, b = rec["triton_us"], rec["per_execution_us"], rec["batch_mean"]
    stages = rec.get("stages_per_execution_us")
    parts: dict[str, float] = {}
    if rec["concurrency"] == 1:
        parts = {"client + gRPC + frontend": rec["client_mean_us"] - t["request"], "queue": t["queue"]}
    parts["stub in"] = e["compute_input"] / b
    if stages:
        parts.update({s: v / b for s, v in stages.items()})
        parts["stub other"] = (e["compute_infer"] - sum(stages.values())) / b
    else:
        parts["execute (no timers)"] = e["compute_infer"] / b
    parts["stub out"] = e["compute_output"] / b
    if rec["concurrency"] == 1:
        parts["triton other"] = t["request"] - sum(t[k] for k in TRITON)
    return parts


def plot(doc: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [(f"{side}\nc{c}", split(doc["sides"][side][f"c{c}"])) for side in doc["sides"] for c in (1, 64)]
    names = list(dict.fromkeys(k for _, parts in bars for k in parts))
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    cmap = plt.get_cmap("tab20")
    for ax, conc in zip(axes, (1, 64), strict=True):
        sel = [(label, parts) for label, parts in bars if label.endswith(f"c{conc}")]
        bottom = [0.0] * len(sel)
        for k, name in enumerate(names):
            vals = [max(parts.get(name, 0.0), 0.0) / 1e3 for _, parts in sel]
            ax.bar([label for label, _ in sel], vals, bottom=bottom, color=cmap(k % 20), label=name)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_ylabel("ms per request (mean)")
        what = "latency, from the client down" if conc == 1 else "work per request: each execution / its requests"
        ax.set_title(f"concurrency {conc}: {what}", fontsize=10)
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.suptitle(f"Where a request's time goes: one short text per request, {doc['model']} model, {doc['cpu']} "
                 f"({doc['date'][:10]})", fontsize=11)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def report(doc: dict) -> str:
    lines = [f"# One request taken apart: {doc['model']}, {doc['cpu']}", "", f"command: `{doc['command']}`", "",
             "Mean microseconds per request (rounds pooled): at concurrency 1 from the client down, summing to the "
             "client's mean latency; at 64 the work per request (each execution's parts divided by its requests).", ""]
    for conc in (1, 64):
        sides = list(doc["sides"])
        rows = {side: split(doc["sides"][side][f"c{conc}"]) for side in sides}
        names = list(dict.fromkeys(k for r in rows.values() for k in r))
        lines += [f"## concurrency {conc}", "", "| part | " + " | ".join(sides) + " |", "|---|" + "---|" * len(sides)]
        for n in names:
            lines.append(f"| {n} | " + " | ".join(f"{rows[s][n]:.0f}" if n in rows[s] else "-" for s in sides) + " |")
        for label, key in (("**client mean latency**", "client_mean_us"), ("client p50 latency", "client_p50_us"),
                           ("req/s", "req_per_s"), ("requests per execution", "batch_mean")):
            lines.append(f"| {label} | " + " | ".join(f"{doc['sides'][s][f'c{conc}'][key]:.0f}" for s in sides) + " |")
        lines.append("")
    f = doc["floor"]
    lines.append(f"The floor (no encoder, the same client): c1 mean {f['c1']['client_mean_us']:.0f} us, of which Triton's "
                 f"request time {f['c1']['triton_us']['request']:.0f} us.")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", nargs="?", help="a commit to take apart beside the working tree (no timers there)")
    ap.add_argument("--model", choices=("tiny", "minilm"), default="tiny")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=1500, help="measured requests per round and concurrency")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="embtrt-breakdown-"))
    try:
        folder, name = pathbench.model_folder(args.model, work)
        texts = [t.strip() for t in pathbench.SHORT.read_text().splitlines() if t.strip()]
        sides = {"head": (ab.ROOT, ["--stage-timers"])}
        if args.base:
            tree = work / "tree-base"
            ab.unpack(args.base, tree)
            sides[args.base] = (tree, [])
        doc: dict = {"model": args.model, "cpu": ab.cpu_name(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "command": " ".join(["python benchmarks/breakdown.py", *([args.base] if args.base else []),
                                          f"--model {args.model}", f"--rounds {args.rounds}", f"--requests {args.requests}"]),
                     "sides": {}}
        from embtrt.measure.floor import FLOOR_MODEL, write_floor
        from embtrt.serve.server import ServerSpec, TritonServer, free_port

        spec = ServerSpec(write_floor(work / "floor", dim=64), grpc_port=free_port(), http_port=free_port(),
                          metrics_port=free_port(), graceful_exit=False)
        with TritonServer(spec) as s:
            doc["floor"] = {"c1": measure(s.grpc_url, FLOOR_MODEL, texts, 1, args.requests, args.rounds, spec.grpc_port, None)}
        for side, (tree, opts) in sides.items():
            repo = work / f"repo-{len(doc['sides'])}"
            ab.build(tree, repo, [str(folder), "--name", name, *opts], work / f"build-{side}.log")
            with ab.Served(repo, work / f"serve-{side}.log", model=name) as s:
                metrics = f"http://127.0.0.1:{s.metrics}/metrics" if opts else None
                doc["sides"][side] = {f"c{c}": measure(f"127.0.0.1:{s.grpc}", name, texts, c, args.requests * (2 if c > 1 else 1),
                                                       args.rounds, s.grpc, metrics) for c in (1, 64)}
            print(f"{side}: " + json.dumps({k: round(v, 1) for k, v in split(doc['sides'][side]['c1']).items()}), flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "breakdown.json").write_text(json.dumps(doc, indent=2) + "\n")
        text = report(doc)
        (args.out / "breakdown.md").write_text(text)
        plot(doc, args.out / "breakdown.png")
        print(text)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
