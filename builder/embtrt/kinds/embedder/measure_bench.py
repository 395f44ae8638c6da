"""`embtrt bench`: the same texts against every target, side by side, in one run.

Targets: Triton gRPC models and OpenAI-compatible `/embeddings` servers (vLLM, TEI,
infinity), plus sentence-transformers in process as a reference line. Scenarios: input
length bucket x concurrency, a fixed number of requests each, warm-up excluded. Targets
alternate within every scenario (and their order rotates between scenarios) so that
machine drift hits all alike. Never one average: every bucket and concurrency is reported
on its own, with p50/p95/p99/max latency, errors, and Triton's queue and compute time.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ...errors import SpecError
from ...measure.driver import Load
# the reports, samplers and targets under the names the CLI and the tests import from here
from ...measure.report import machine, markdown, plots, plots_unavailable, save  # noqa: F401
from ...measure.samplers import PeakRss, PeakSampler, _own_cpu_seconds, tree_cpu_seconds, tree_rss_bytes  # noqa: F401
from ...measure.texts import length_buckets  # noqa: F401
from ...measure.targets import EncoderInProcess, Target, _encoder_inprocess, _inprocess, client_for, plans_of


class _Paused:
    """SIGSTOP the other targets' servers during one target's scenario: on a small machine an
    idle server that polls (seen: infinity-emb at ~65% of a core while idle) takes CPU from the
    one being measured."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def _send(self, sig: int) -> None:
        import os

        for p in self.pids:  # a negative pid names a process group (tritonserver and its stubs)
            try:
                os.killpg(-p, sig) if p < 0 else os.kill(p, sig)
            except ProcessLookupError:
                pass

    def __enter__(self) -> None:
        self._send(signal.SIGSTOP)

    def __exit__(self, *exc: object) -> None:
        self._send(signal.SIGCONT)


@dataclass
class Result:
    target: str
    kind: str
    bucket: str
    concurrency: int
    texts_per_request: int
    sent: int
    ok: int
    errors: int
    seconds: float
    req_per_s: float
    texts_per_s: float
    tokens_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    error_samples: list[str] = field(default_factory=list)
    triton: dict = field(default_factory=dict)  # queue / compute per request, from the statistics API
    # CPU milliseconds per request of each watched process tree (e.g. tritonserver and its stubs, the
    # gateway), over the scenario's warm-up and measured requests
    cpu_ms_per_req: dict = field(default_factory=dict)
    # peak resident memory (MiB) of each watched process tree, sampled every 50 ms during the scenario
    peak_rss_mib: dict = field(default_factory=dict)
    client_cpu_ms_per_req: float | None = None  # the load generator's own (this process's) CPU per request


def _pct(lat: list[float], q: float) -> float:
    return float(np.percentile(lat, q)) if lat else float("nan")


def _result(target: Target, bucket: str, conc: int, per_req: int, sent: int, lat: list[float], errors: int,
            samples: list[str], seconds: float, n_tok: int, triton: dict | None = None) -> Result:
    ok = len(lat)
    if ok + errors != sent:
        raise AssertionError(f"bench bookkeeping: {ok} ok + {errors} errors != {sent} sent")
    secs = max(seconds, 1e-9)
    return Result(target.name, target.kind, bucket, conc, per_req, sent, ok, errors, seconds, ok / secs,
                  ok * per_req / secs, n_tok / secs, _pct(lat, 50), _pct(lat, 95), _pct(lat, 99),
                  max(lat) if lat else float("nan"), samples, triton or {})


async def _scenario_processes(t: Target, texts, plans, conc, requests, warmup, tokens) -> _Raw:
    """A Triton target driven by embtrt.measure.loadgen from `t.processes` processes (the warm-up plans first,
    unmeasured, as their warm-up), Triton's statistics read around it."""
    from ...measure.loadgen import Job, run
    from ...serve.wire import output_name

    measured = plans[warmup:]
    job = Job(t.url, t.model, tuple(tuple(texts[j] for j in p) for p in measured), requests, conc, t.processes, "grpc",
              warmup=warmup, output=output_name(t.options), parameters=tuple(t.options.items()))
    client = client_for(t)
    try:
        before = await client.stats()
        out = await asyncio.to_thread(run, job)
        want = before.get(t.model, (0, 0, 0))[0] + out.warmup_sent + len(out.latencies_s)
        after = await client.stats()
        for _ in range(20):
            if after.get(t.model, (0, 0, 0))[0] >= want:
                break
            await asyncio.sleep(0.05)
            after = await client.stats()
    finally:
        await client.close()
    return _Raw(lat=[s * 1e3 for s in out.latencies_s], errors=out.errors, samples=out.error_samples[:3],
                seconds=out.wall_s, tokens=sum(int(tokens[measured[i]].sum()) for i in out.indices), sent=requests,
                triton=_triton_delta(before, after, t.model), client_cpu_s=out.client_cpu_s)


def _triton_delta(before: dict, after: dict, model: str) -> dict:
    """The model and its sub-models -> [requests, queue ns, compute ns] served between two snapshots."""
    out = {}
    for name in sorted(after):
        if name != model and not name.startswith(model + "_"):
            continue
        b = before.get(name, (0, 0, 0))
        a = after[name]
        if a[0] - b[0] > 0:
            out[name] = [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
    return out


def run_bench(targets: list[Target], texts: list[str], token_counts: np.ndarray, *, buckets: tuple[int, ...],
              concurrency: tuple[int, ...], texts_per_request: int = 1, requests: int = 200, warmup: int = 20,
              inprocess_model: Path | None = None, ort_repo: Path | None = None, engine_repos: tuple[Path, ...] = (),
              seed: int = 0, only_buckets: tuple[str, ...] | None = None,
              progress: Callable[[str], None] | None = None, cpu_pids: dict[str, int] | None = None,
              rounds: int = 1, trust_remote_code: bool = False) -> dict:
    """`rounds`: each scenario's requests are split into that many rounds, every target taking its turn in
    each round (the order rotating), and pooled: slow drifts of a shared machine then fall on every target
    alike instead of on whichever ran when the drift came."""
    if not targets and inprocess_model is None and ort_repo is None and not engine_repos:
        raise SpecError("invalid targets: none given", "pass --url/--model, --openai-url/--openai-model or --inprocess")
    if requests < 1 or texts_per_request < 1 or any(c < 1 for c in concurrency):
        raise SpecError("invalid scenario: requests, texts per request and concurrency must be >= 1")
    if not 1 <= rounds <= requests:
        raise SpecError(f"invalid --rounds {rounds}: from 1 to the requests per scenario ({requests})")
    groups = length_buckets(token_counts, buckets)
    if only_buckets:
        groups = {k: v for k, v in groups.items() if k in only_buckets}
    results: list[Result] = []
    st_model = None
    if inprocess_model is not None:
        from sentence_transformers import SentenceTransformer

        st_model = SentenceTransformer(str(inprocess_model), device="cpu", trust_remote_code=trust_remote_code)
    lines = ([EncoderInProcess(ort_repo)] if ort_repo is not None else []) + \
        [EncoderInProcess(r, runtime="repo") for r in engine_repos]
    scenario = 0
    for bucket, rows in groups.items():
        for conc in concurrency:
            order = targets[scenario % len(targets):] + targets[:scenario % len(targets)] if targets else []
            scenario += 1
            raw = {id(t): _Raw() for t in order}
            for rnd in range(rounds):
                n_round = requests // rounds + (1 if rnd < requests % rounds else 0)
                for t in order[rnd % len(order):] + order[:rnd % len(order)] if order else []:
                    if progress:
                        progress(f"{t.name}: bucket {bucket}, concurrency {conc}"
                                 + (f", round {rnd + 1}/{rounds}" if rounds > 1 else ""))
                    others = sorted({p for o in targets if o is not t for p in o.pids} - set(t.pids))  # never its own server
                    with _Paused(others):
                        cpu0 = {k: tree_cpu_seconds(p) for k, p in (cpu_pids or {}).items()}
                        own0 = _own_cpu_seconds()
                        with PeakRss(cpu_pids or {}) as mem:
                            one = asyncio.run(_scenario(t, texts, rows, conc, texts_per_request, n_round, warmup,
                                                        seed + scenario + 1000 * rnd, token_counts))
                        one.cpu_s = {k: tree_cpu_seconds(p) - cpu0[k] for k, p in (cpu_pids or {}).items()}
                        # this process's CPU, and the generator processes' where they drove the load
                        one.client_cpu_s, one.rss = one.client_cpu_s + _own_cpu_seconds() - own0, mem.mib()
                        raw[id(t)].add(one)
            for t in order:
                results.append(raw[id(t)].result(t, bucket, conc, texts_per_request, warmup * rounds))
            if conc == concurrency[0]:
                with _Paused([p for o in targets for p in o.pids]):  # in-process lines: every server paused
                    if st_model is not None:
                        if progress:
                            progress(f"sentence-transformers in process: bucket {bucket}")
                        lat, secs, n_tok = _inprocess(texts, rows, texts_per_request, min(requests, 200), min(warmup, 10),
                                                      seed + scenario, token_counts, st_model)
                        results.append(_result(Target("sentence-transformers (in process)", "inprocess"), bucket, 1,
                                               texts_per_request, len(lat), lat, 0, [], secs, n_tok))
                    for line in lines:
                        if progress:
                            progress(f"{line.label} in process: bucket {bucket}")
                        (lat, secs, n_tok), (blat, bsecs, btok) = _encoder_inprocess(
                            line, texts, rows, texts_per_request, min(requests, 300), min(warmup, 20), seed + scenario,
                            token_counts)
                        results.append(_result(Target(f"{line.label} (in process)", "inprocess"), bucket, 1, texts_per_request,
                                               len(lat), lat, 0, [], secs, n_tok))
                        r = _result(Target(f"{line.label} (in process, batches of 32)", "inprocess"), bucket, 1, 32,
                                    len(blat), blat, 0, [], bsecs, btok)
                        r.texts_per_s = len(lat) * texts_per_request / max(bsecs, 1e-9)
                        results.append(r)
    return {
        "embtrt_bench": 1,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "scenario": {"buckets": list(buckets), "concurrency": list(concurrency), "texts_per_request": texts_per_request,
                     "requests": requests, "warmup": warmup, "rounds": rounds, "texts": len(texts),
                     "bucket_sizes": {k: int(v.size) for k, v in groups.items()}},
        "targets": [asdict(t) for t in targets],
        "results": [asdict(r) for r in results],
    }


@dataclass
class _Raw:
    """One target's measurements in one scenario: of one round, or summed over its rounds."""

    lat: list[float] = field(default_factory=list)
    errors: int = 0
    samples: list[str] = field(default_factory=list)
    seconds: float = 0.0
    tokens: int = 0
    sent: int = 0
    triton: dict = field(default_factory=dict)       # model -> [requests, queue ns, compute ns]
    cpu_s: dict = field(default_factory=dict)        # label -> CPU seconds of the watched tree
    client_cpu_s: float = 0.0
    rss: dict = field(default_factory=dict)          # label -> peak MiB

    def add(self, one: "_Raw") -> None:
        self.lat += one.lat
        self.errors += one.errors
        self.samples = (self.samples + one.samples)[:5]
        self.seconds += one.seconds
        self.tokens += one.tokens
        self.sent += one.sent
        for name, d in one.triton.items():
            acc = self.triton.setdefault(name, [0, 0, 0])
            for i in range(3):
                acc[i] += d[i]
        for k, v in one.cpu_s.items():
            self.cpu_s[k] = self.cpu_s.get(k, 0.0) + v
        self.client_cpu_s += one.client_cpu_s
        for k, v in one.rss.items():
            self.rss[k] = max(self.rss.get(k, 0.0), v)

    def result(self, t: Target, bucket: str, conc: int, per_req: int, warmups: int) -> Result:
        tri = {n: {"requests": a[0], "queue_us": a[1] / a[0] / 1e3, "compute_us": a[2] / a[0] / 1e3}
               for n, a in self.triton.items()}
        res = _result(t, bucket, conc, per_req, self.sent, self.lat, self.errors, self.samples, self.seconds, self.tokens,
                      tri)
        n = max(self.sent + warmups, 1)  # CPU over warm-up and measured requests
        res.cpu_ms_per_req = {k: round(v * 1e3 / n, 3) for k, v in self.cpu_s.items()}
        res.client_cpu_ms_per_req = round(self.client_cpu_s * 1e3 / n, 3)
        res.peak_rss_mib = dict(self.rss)
        return res


async def _scenario(t: Target, texts, rows, conc, per_req, requests, warmup, seed, tokens) -> _Raw:
    """One target, one round of a scenario: warm-up requests first (not measured), then `requests` at
    `conc` -> its measurements (the caller adds CPU and memory)."""
    plans = plans_of(rows, per_req, requests + warmup, seed)
    if t.kind == "triton" and t.processes > 1:
        return await _scenario_processes(t, texts, plans, conc, requests, warmup, tokens)
    client = client_for(t)

    def load(batch: list[list[int]], c: int) -> Load:
        return Load(lambda i: client.embed([texts[j] for j in batch[i]]), len(batch), c)

    try:
        before = await client.stats()
        if warmup:
            await load(plans[:warmup], min(conc, warmup)).run()
        run = await load(plans[warmup:], conc).run()
        # Triton updates its statistics just after a response is sent: wait until they include ours.
        want = before.get(t.model, (0, 0, 0))[0] + warmup + run.ok
        after = await client.stats()
        for _ in range(20):
            if t.kind != "triton" or after.get(t.model, (0, 0, 0))[0] >= want:
                break
            await asyncio.sleep(0.05)
            after = await client.stats()
    finally:
        await client.close()
    errors = [f.message[:200] for f in run.failures]  # counted and sampled in the report
    return _Raw(lat=[s * 1e3 for s in run.latencies.values()], errors=len(errors), samples=errors[:3], seconds=run.seconds,
                tokens=sum(int(tokens[plans[warmup + i]].sum()) for i in run.latencies), sent=requests,
                triton=_triton_delta(before, after, t.model) if t.kind == "triton" else {})


def tune_trial(manifest, spec, url: str, texts: list[str], counts: np.ndarray, error: type[Exception]) -> tuple[dict, dict]:
    """`embtrt tune`'s trial of an embedder (Kind.tune_trial): mixed texts, or each SLO's length band on its own ->
    ({concurrency: req/s, p50, p99}: the bands' sum and worst, {band: {concurrency: figures}}); `error` is raised
    where requests failed or the corpus has no texts of a band."""
    t = Target("trial", "triton", url, manifest.name)
    slo = spec.slo_p99_ms
    labels = tuple(f"<={b}" for b in slo) if isinstance(slo, dict) else ("mixed",)
    doc = run_bench([t], texts, counts, buckets=tuple(manifest.buckets), concurrency=spec.concurrency,
                    texts_per_request=1, requests=spec.requests, warmup=spec.warmup,
                    inprocess_model=None, only_buckets=labels)
    bands: dict[str, dict[int, dict]] = {}
    for r in doc["results"]:
        if r["errors"]:
            raise error(f"trial requests failed: {r['error_samples'][:2]}", "see the tritonserver log")
        bands.setdefault(r["bucket"], {})[int(r["concurrency"])] = {
            "req_per_s": r["req_per_s"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}
    missing = [x for x in labels if x not in bands]
    if missing:
        raise error(f"the corpus has no texts in the length band(s) {', '.join(missing)}",
                    "pass a --corpus with texts of those lengths, or SLOs for other buckets")
    if labels == ("mixed",):
        return bands["mixed"], {}
    # several bands: throughput is their sum, latency the worst of them (feasibility is per band)
    out = {c: {"req_per_s": round(sum(bands[x][c]["req_per_s"] for x in labels), 2),
               "p50_ms": max(bands[x][c]["p50_ms"] for x in labels),
               "p99_ms": max(bands[x][c]["p99_ms"] for x in labels)} for c in spec.concurrency}
    return out, bands
