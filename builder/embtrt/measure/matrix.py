"""`embtrt matrix`: the long-context stress matrix of one repository.

For each token budget (`--max-batch-tokens`), the repository's configs are reloaded through
Triton's repository API (the budget sets only batch sizes, preferred sizes, warm-up and the
front door's chunking: `repository.budget.with_budget`), then every length band x concurrency
cell runs on real texts of that band (corpus texts, concatenated for the long bands, cut at a
word to the band's token count). Per cell: req/s, tokens/s, p50/p95/p99, errors by kind
(queue full, out of memory, timeout, other), the server process tree's peak RSS (and each
GPU's peak memory from NVML on a GPU host), sampled during the cell, and the cosine of every
returned vector against the same text's vector embedded alone beforehand (min and p01).

Two more cells per budget:
- preemption: a text of (max length - a few hundred) tokens, sent repeatedly through the front
  door and through the largest bucket's ensemble while short-text load runs at concurrency 64,
  must give its unloaded vector (cosine >= 0.999; 1.0 on the exact path);
- mixed traffic: the shortest band's p50/p95 alone and with long requests running beside it;
  with `pools`, also through the bucket ensembles with both bands on one server, then with the
  longest band's bucket on a second server (a length pool), to show what pools buy.

Vectors are compared with the unloaded ones because that is the promise under load: batching,
chunking and scheduling never change a vector.
"""

from __future__ import annotations

import asyncio
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import SpecError
from ..repository.budget import bucket_models, budget_models, check_budget_change, with_budget
from ..repository.manifest import read_manifest
from ..serve import wire
from .checked import Checked, beside, drive_checked
from .report import machine, matrix_markdown, matrix_plots, write_matrix
from .reload import load_configs, model_configs, ready_models
from .samplers import GpuPeak, PeakRss, PeakSampler
from .texts import band_texts

Log = Callable[[str], None]
COSINE_MIN = 0.999          # the preemption promise (and each cell's min is reported against it)


@dataclass(frozen=True)
class MatrixSpec:
    repository: Path
    budgets: tuple[int, ...]
    concurrency: tuple[int, ...] = (1, 8, 32, 64)
    bands: tuple[int, ...] | None = None      # bucket edges to run (default: every bucket)
    requests: int = 64                        # per cell
    texts: int = 8                            # distinct texts per band (each embedded alone first)
    corpus: Path | None = None
    url: str | None = None                    # a server in explicit model-control mode; default: serve it here
    out: Path | None = None
    preempt: bool = True
    preempt_concurrency: int = 64
    preempt_repeats: int = 2
    mixed: bool = True
    # length pools: the mixed traffic again with the longest band on a second server (`pool_url`, or
    # one started here serving that bucket's models only), against both bands on one server
    pools: bool = False
    pool_url: str | None = None
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.budgets:
            raise SpecError("invalid --max-batch-tokens: give one or more token budgets", "e.g. 512,1024,2048")
        if not self.concurrency or min(self.concurrency) < 1:
            raise SpecError(f"invalid concurrency: {self.concurrency}", "positive integers, e.g. 1,8,32,64")
        if self.requests < 1 or self.texts < 1 or self.preempt_repeats < 1 or self.preempt_concurrency < 1:
            raise SpecError("invalid matrix sizes: requests, texts, preempt repeats and concurrency must be >= 1")


# ---- measurement ---------------------------------------------------------------------------

def error_kind(message: str) -> str:
    """The matrix's kinds of a failed request's message: serve.wire's queue_full, oom and timeout, where any
    message naming a timeout or deadline counts as a timeout (Triton's queue policy rejects with UNAVAILABLE
    'Request timeout expired', which the wire calls unavailable: retried elsewhere); anything else is other."""
    kind = wire.classify(message)
    if kind not in (wire.QUEUE_FULL, wire.OOM) and ("timeout" in message.lower() or "deadline" in message.lower()):
        return wire.TIMEOUT
    return kind if kind in (wire.QUEUE_FULL, wire.OOM, wire.TIMEOUT) else wire.OTHER


@dataclass
class Cell:
    budget: int
    kind: str                      # band | preempt | mixed
    band: str
    concurrency: int
    sent: int = 0
    ok: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    seconds: float = 0.0
    req_per_s: float = 0.0
    tokens_per_s: float = 0.0
    p50_ms: float = float("nan")
    p95_ms: float = float("nan")
    p99_ms: float = float("nan")
    cos_min: float | None = None
    cos_p01: float | None = None
    peak_rss_mib: float | None = None
    gpu_peak_mib: dict[str, float] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def _fill(cell: Cell, calls: Checked, seconds: float, mem: PeakSampler | None = None, gpu: PeakSampler | None = None) -> Cell:
    """The cell's figures from its calls, and the server's peak memory (and the GPUs') where sampled."""
    cell.peak_rss_mib = mem.mib().get("server") if mem is not None else None
    cell.gpu_peak_mib = gpu.mib() if gpu is not None else {}
    cell.ok, cell.errors = len(calls.lat), len(calls.errors)
    cell.sent = cell.ok + cell.errors
    for e in calls.errors:
        k = error_kind(e)
        cell.error_kinds[k] = cell.error_kinds.get(k, 0) + 1
    cell.error_samples = sorted(set(calls.errors))[:3]
    cell.seconds = round(seconds, 3)
    cell.req_per_s = round(cell.ok / seconds, 2) if seconds > 0 else 0.0
    cell.tokens_per_s = round(calls.tok / seconds, 1) if seconds > 0 else 0.0
    if calls.lat:
        ms = np.asarray(calls.lat) * 1e3
        cell.p50_ms, cell.p95_ms, cell.p99_ms = (round(float(np.percentile(ms, q)), 2) for q in (50, 95, 99))
    if calls.cos:
        cos = np.asarray(calls.cos)
        cell.cos_min, cell.cos_p01 = round(float(cos.min()), 6), round(float(np.percentile(cos, 1)), 6)
    return cell


class Matrix:
    def __init__(self, spec: MatrixSpec, log: Log = print) -> None:
        self.spec, self.log = spec, log
        self.manifest = read_manifest(spec.repository).require_length_pools("embtrt matrix")
        for b in spec.budgets:
            check_budget_change(self.manifest, b)
        from ..common.backend import backend_lib

        text_mod, _ = backend_lib()
        m = self.manifest
        self.tok = text_mod.TextTokenizer(str(Path(spec.repository) / m.name / "1" / "tokenizer.json"), 1 << 20,
                                          m.pad_id).tok
        self.bands = list(spec.bands or m.buckets)
        bad = sorted(set(self.bands) - set(m.buckets))
        if bad:
            raise SpecError(f"invalid bands {bad}: not buckets of {m.name}", f"its buckets: {','.join(map(str, m.buckets))}")
        self.cells: list[Cell] = []
        self.loaded: dict[int, dict[int, int]] = {}   # budget -> the server's max batch per bucket encoder

    # ---- server ----------------------------------------------------------------------------

    def _configs(self, url: str) -> dict[str, dict]:
        """The configs the budget touches, of the models this server has loaded."""
        return model_configs(url, budget_models(self.manifest, ready_models(url)))

    def _reload(self, url: str, want: dict[str, dict], current: dict[str, dict]) -> dict[str, dict]:
        """Load only the configs of `want` that differ from `current` (the server's now) -> `want`."""
        load_configs(url, self.manifest, {k: v for k, v in want.items() if v != current.get(k)}, SpecError,
                     "start it with --model-control-mode=explicit, or let embtrt serve the repository (no --url)")
        return want

    # ---- run -------------------------------------------------------------------------------

    def run(self, texts: list[str]) -> dict:
        from contextlib import ExitStack

        from ..serve.server import ServerSpec, TritonServer, free_port

        def start(models: tuple[str, ...]) -> TritonServer:
            return TritonServer(ServerSpec(self.spec.repository, grpc_port=free_port(), http_port=free_port(),
                                           metrics_port=free_port(), models=models))

        with ExitStack() as stack:
            url, pid = self.spec.url, None
            if url is None:
                srv = stack.enter_context(start(tuple(sorted(p.parent.name for p in
                                                             Path(self.spec.repository).glob("*/config.pbtxt")))))
                url, pid = srv.grpc_url, srv.proc.pid if srv.proc is not None else None
                self.log(f"serving {self.spec.repository} on {url} (explicit model control)")
            pool_url, pool_pid = self.spec.pool_url, None
            if self.spec.pools and len(self.bands) > 1 and pool_url is None:
                top = max(self.bands)
                have = {p.parent.name for p in Path(self.spec.repository).glob("*/config.pbtxt")}
                srv2 = stack.enter_context(start(tuple(m for m in bucket_models(self.manifest.name, top) if m in have)))
                pool_url, pool_pid = srv2.grpc_url, srv2.proc.pid if srv2.proc is not None else None
                self.log(f"length pool: the {top}-token bucket's models on a second server, {pool_url}")
            return self._run(url, pid, texts, pool_url, pool_pid)

    def _unloaded(self, url: str, model: str, texts: list[str]) -> np.ndarray:
        """Each text's vector embedded alone (one request at a time, nothing else running)."""
        calls = Checked(model, texts, [0] * len(texts), None)
        asyncio.run(drive_checked(url, calls, len(texts), 1, self.spec.timeout_s))
        if calls.errors:
            raise SpecError(f"{model} failed to embed a text alone: {calls.errors[0]}", "see the tritonserver log")
        return np.asarray([calls.vecs[k] for k in range(len(texts))])

    def _run(self, url: str, pid: int | None, corpus: list[str], pool_url: str | None = None,
             pool_pid: int | None = None) -> dict:
        m, spec = self.manifest, self.spec
        name = m.name
        edges = [0] + list(m.buckets)
        band = {}
        for b in self.bands:
            lo = edges[edges.index(b) - 1]
            ts = band_texts(self.tok, corpus, lo, b, spec.texts)
            band[b] = (ts, [len(self.tok.encode(t).ids) for t in ts])
        self.log("bands: " + ", ".join(f"<={b}: {len(ts)} texts, {min(n)}..{max(n)} tokens" for b, (ts, n) in band.items()))
        top = max(m.buckets)
        base = self._configs(url)
        self.log("embedding every text alone (the unloaded vectors)")
        ref = {b: self._unloaded(url, name, ts) for b, (ts, _) in band.items()}
        longs, long_tokens, ref_long, ref_long_bucket = [], [], None, None
        if spec.preempt:  # max length - a few hundred tokens (an eighth of it for short models)
            long_len = m.max_seq_length - 300 if m.max_seq_length > 1200 else m.max_seq_length - m.max_seq_length // 8
            longs = band_texts(self.tok, corpus, edges[-2] if len(edges) > 2 else 0, top, 1, target=long_len)
            long_tokens = [len(self.tok.encode(t).ids) for t in longs]
            ref_long = self._unloaded(url, name, longs)
            if f"{name}_{top}" in ready_models(url):
                ref_long_bucket = self._unloaded(url, f"{name}_{top}", longs)
        short = min(self.bands)
        pids = {"server": pid} if pid else {}
        current = dict(base)
        pool_base = self._configs(pool_url) if pool_url else {}
        pool_current = dict(pool_base)
        try:
            for budget in spec.budgets:
                t0 = time.time()
                current = self._reload(url, with_budget(m, base, budget), current)
                if pool_url:
                    pool_current = self._reload(pool_url, with_budget(m, pool_base, budget), pool_current)
                self.loaded[budget] = self._batches(url)
                self.log(f"budget {budget}: configs reloaded in {time.time() - t0:.1f} s; the server's max batch per "
                         f"bucket: {self.loaded[budget]}")
                for b in self.bands:
                    ts, ns = band[b]
                    for conc in spec.concurrency:
                        calls = Checked(name, ts, ns, ref[b])
                        with PeakRss(pids) as mem, GpuPeak() as gpu:
                            secs = asyncio.run(drive_checked(url, calls, spec.requests, conc, spec.timeout_s))[0].seconds
                        self._add(_fill(Cell(budget, "band", f"<={b}", conc), calls, secs, mem, gpu))
                if spec.preempt:
                    self._preempt(url, pids, budget, longs, long_tokens, ref_long, ref_long_bucket, band[short], ref[short])
                if spec.mixed and len(self.bands) > 1:
                    self._mixed(url, pids, budget, band[short], ref[short], band[max(self.bands)], ref[max(self.bands)])
                if pool_url and len(self.bands) > 1:
                    self._pools(url, pool_url, {**pids, **({"pool": pool_pid} if pool_pid else {})}, budget,
                                band[short], ref[short], band[max(self.bands)], ref[max(self.bands)])
        finally:
            if spec.url:  # a server of the caller's: its own configuration again (ours is stopped anyway)
                self._reload(url, base, current)
            if spec.pool_url:
                self._reload(spec.pool_url, pool_base, pool_current)
        return self.report(band, long_tokens)

    def _batches(self, url: str) -> dict[int, int]:
        """Each bucket encoder's max_batch_size as the server now has it (read back after a reload)."""
        import tritonclient.grpc as grpcclient

        c = grpcclient.InferenceServerClient(url)
        try:
            return {b: int(c.get_model_config(f"{self.manifest.name}_{b}_encoder", as_json=True)["config"]
                           .get("max_batch_size", 0)) for b in self.manifest.buckets}
        finally:
            c.close()

    def _add(self, cell: Cell) -> None:
        self.cells.append(cell)
        cos = f"cos min {cell.cos_min:.6f}" if cell.cos_min is not None else "no vectors"
        self.log(f"budget {cell.budget} {cell.kind} {cell.band} c{cell.concurrency}: {cell.ok}/{cell.sent} ok, "
                 f"{cell.req_per_s:.1f} req/s, p95 {cell.p95_ms:.1f} ms, {cos}, peak RSS {cell.peak_rss_mib} MiB"
                 + (f", errors {cell.error_kinds}" if cell.errors else ""))

    def _preempt(self, url, pids, budget, longs, long_tokens, ref_long, ref_bucket, short_band, short_ref) -> None:
        """The long text, repeatedly, through the front door and the largest bucket, under short load."""
        spec, name, top = self.spec, self.manifest.name, max(self.manifest.buckets)
        routes = [(name, ref_long)] + ([(f"{name}_{top}", ref_bucket)] if ref_bucket is not None else [])
        for model, ref in routes:
            load = Checked(name, short_band[0], short_band[1], short_ref)
            long = Checked(model, longs, long_tokens, ref)

            with PeakRss(pids) as mem, GpuPeak() as gpu:  # the load runs half a second before the long text arrives
                fg, (bg,) = asyncio.run(drive_checked(url, long, spec.preempt_repeats, 1, spec.timeout_s,
                                                       beside=((url, load, spec.preempt_concurrency),), lead_s=0.5))
            cell = _fill(Cell(budget, "preempt", model, spec.preempt_concurrency), long, fg.seconds, mem, gpu)
            short = _fill(Cell(budget, "load", f"<={min(self.bands)}", spec.preempt_concurrency), load, bg.seconds)
            cell.extra = {"long_tokens": long_tokens[0], "load": {k: getattr(short, k) for k in
                          ("sent", "ok", "errors", "error_kinds", "req_per_s", "p50_ms", "p95_ms", "p99_ms", "cos_min")}}
            cell.extra["load"]["max_ms"] = round(max(load.lat) * 1e3, 2) if load.lat else float("nan")
            # the cell's promise (#54): every short request answered and right, every long vector within
            # COSINE_MIN of the text embedded alone
            cell.extra["passed"] = (short.errors == 0 and short.ok > 0 and cell.errors == 0 and cell.ok > 0
                                    and (cell.cos_min or 0.0) >= COSINE_MIN and (short.cos_min or 0.0) >= COSINE_MIN)
            self._add(cell)
            if not cell.extra["passed"]:
                self.log(f"preemption cell FAILED ({model}): short {short.ok}/{short.sent} ok "
                         f"{short.error_kinds or ''}, long {cell.ok}/{cell.sent} ok, long cos min {cell.cos_min}")

    def _mixed(self, url, pids, budget, short_band, short_ref, long_band, long_ref) -> None:
        """The shortest band's latency alone, then with long requests running beside it (2 streams, until
        at least two of them are done)."""
        spec, name = self.spec, self.manifest.name
        conc = min(8, max(spec.concurrency))
        alone = Checked(name, short_band[0], short_band[1], short_ref)
        with PeakRss(pids) as mem:
            secs = asyncio.run(drive_checked(url, alone, spec.requests, conc, spec.timeout_s))[0].seconds
        a = _fill(Cell(budget, "mixed", f"<={min(self.bands)} alone", conc), alone, secs, mem)
        self._add(a)
        short = Checked(name, short_band[0], short_band[1], short_ref)
        long = Checked(name, long_band[0], long_band[1], long_ref)
        with PeakRss(pids) as mem, GpuPeak() as gpu:
            secs = asyncio.run(beside(url, short, url, long, conc, spec.requests, spec.timeout_s))
        w = _fill(Cell(budget, "mixed", f"<={min(self.bands)} with <={max(self.bands)}", conc), short, secs, mem, gpu)
        lc = _fill(Cell(budget, "long", f"<={max(self.bands)}", 2), long, secs)
        w.extra = {"long": {k: getattr(lc, k) for k in ("sent", "ok", "errors", "p95_ms", "cos_min")},
                   "p95_vs_alone": round(w.p95_ms / a.p95_ms, 2) if a.p95_ms and a.p95_ms == a.p95_ms else None}
        self._add(w)

    def _pools(self, url, pool_url, pids, budget, short_band, short_ref, long_band, long_ref) -> None:
        """What length pools buy: the shortest band's bucket ensemble under two streams of the longest
        band's, first with both on one server, then with the long bucket on a server of its own."""
        spec, name = self.spec, self.manifest.name
        conc = min(8, max(spec.concurrency))
        lo, hi = min(self.bands), max(self.bands)
        for label, long_url in (("one server", url), ("two servers", pool_url)):
            short = Checked(f"{name}_{lo}", short_band[0], short_band[1], short_ref)
            long = Checked(f"{name}_{hi}", long_band[0], long_band[1], long_ref)
            with PeakRss(pids) as mem, GpuPeak() as gpu:
                secs = asyncio.run(beside(url, short, long_url, long, conc, spec.requests, spec.timeout_s))
            cell = _fill(Cell(budget, "pools", f"<={lo} with <={hi}, {label}", conc), short, secs, mem, gpu)
            lc = _fill(Cell(budget, "long", f"<={hi}", 2), long, secs)
            cell.extra = {"long": {k: getattr(lc, k) for k in ("sent", "ok", "errors", "req_per_s", "p95_ms", "cos_min")},
                          "pool_peak_rss_mib": mem.mib().get("pool")}
            self._add(cell)

    def report(self, band: dict, long_tokens: list[int]) -> dict:
        return {"repository": str(self.spec.repository), "model": self.manifest.name,
                "target": self.manifest.target, "precision": self.manifest.precision,
                "built_budget": self.manifest.max_batch_tokens, "max_batch_size": self.manifest.max_batch_size,
                "budgets": list(self.spec.budgets), "concurrency": list(self.spec.concurrency),
                "server_max_batch": {str(k): {str(b): n for b, n in v.items()} for k, v in self.loaded.items()},
                "bands": {f"<={b}": {"texts": len(ts), "tokens": [min(n), max(n)]} for b, (ts, n) in band.items()},
                "long_tokens": long_tokens[0] if long_tokens else None, "requests_per_cell": self.spec.requests,
                "preempt_concurrency": self.spec.preempt_concurrency,
                "machine": machine(), "python": platform.python_version(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "preempt_passed": all(c.extra.get("passed", True) for c in self.cells if c.kind == "preempt"),
                "cells": [asdict(c) for c in self.cells]}


# the reports under the names the CLI imports from here
markdown, plots, write = matrix_markdown, matrix_plots, write_matrix


def run_matrix(spec: MatrixSpec, log: Log = print) -> dict:
    from ..common.corpus import load_corpus

    doc = Matrix(spec, log).run(load_corpus(spec.corpus))
    if spec.out is not None:
        for p in write(doc, Path(spec.out)):
            log(f"wrote {p}")
    return doc
