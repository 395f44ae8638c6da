"""One `verify` and bench scaffold for the kinds whose front door serves them (the reranker, the
sparse encoder): a kind writes its `KindMeasure` (embtrt.kinds.reranker.measure, embtrt.kinds.sparse.measure) — what it
sends, what comes back as rows, its gate and its bounds — and the scaffold runs the rest: the
gate or the comparison with another deployment, every item resent under load, the bench and
`embtrt tune` loads (warm-up one call at a time, then the load driver) and their figures."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np
from embtrt_backend.kinds import Kind

from ..reference.verdict import Verdict
from .driver import Load, drive


def figures(load: Load) -> dict:
    """A load's calls: requests, req/s, p50 and p99 (ms), errors and the first three messages."""
    lat = sorted(load.latencies.values())
    q = (lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3) if lat else (lambda p: float("nan"))
    return {"requests": load.ok, "req_per_s": load.ok / load.seconds if load.seconds else 0.0,
            "p50_ms": q(0.5), "p99_ms": q(0.99), "errors": len(load.failures),
            "error_samples": [f.message[:200] for f in load.failures[:3]]}


def load_row(target: str, fields: dict, load: Load, unit: str, per: int) -> dict:
    """A bench row of a served load: its target, the kind's fields, its figures and `unit` per second (`per` a request)."""
    f = figures(load)
    return {"target": target, **fields, **f, f"{unit}_per_s": f["req_per_s"] * per}


def inprocess_row(target: str, fields: dict, run: Callable[[list], Any], calls: list[list], per: int, unit: str,
                  passes: int = 3, p50: bool = False) -> dict:
    """A bench row of the in-process reference: `run` on each of `calls` (`per` items a request) timed, the
    median of `passes`; `p50` (one item a request): an item's time, else NaN as the p99."""
    times = []
    for _ in range(passes):
        t0 = time.perf_counter()
        for call in calls:
            run(call)
        times.append(time.perf_counter() - t0)
    sec, items = statistics.median(times), sum(map(len, calls))
    return {"target": target, **fields, "requests": items // per, "req_per_s": items / per / sec,
            f"{unit}_per_s": items / sec, "p50_ms": (sec / items * 1e3) if p50 else float("nan"), "p99_ms": float("nan"),
            "errors": 0, "error_samples": []}


def markdown(rows: list[dict], lead: dict[str, str], unit: str) -> str:
    """A bench's rows as a markdown table: the `lead` columns (header: key), then req/s, `unit`/s, p50 and
    p99 ms (one decimal) and errors."""
    head = [*lead, "req/s", f"{unit}/s", "p50 ms", "p99 ms", "errors"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        figs = [f"{r[k]:.1f}" for k in ("req_per_s", f"{unit}_per_s", "p50_ms", "p99_ms")]
        lines.append("| " + " | ".join([*(str(r[k]) for k in lead.values()), *figs, str(r["errors"])]) + " |")
    return "\n".join(lines) + "\n"


async def warm_then_load(call: Callable[[int], Awaitable[Any]], n: int, warmup: int, conc: int) -> Load:
    """Calls 0..warmup-1 one at a time (not measured), then the rest at `conc` through the load driver."""
    for i in range(min(warmup, n)):
        await call(i)
    return await Load(lambda i: call(warmup + i), max(0, n - warmup), conc).run()


def text_trial(url: str, model: str, texts: list[str], conc: int, requests: int, warmup: int,
               parameters: dict | None = None) -> Load:
    """`embtrt tune`'s trial of a front door taking TEXT: one real text per request (picked with a seed of
    `conc`), with the request `parameters`, warm-up then the load at `conc`."""
    import tritonclient.grpc.aio as aioclient

    from ..serve.wire import text_input

    rng = random.Random(conc)
    picks = [rng.choice(texts) for _ in range(requests + warmup)]

    async def run() -> Load:
        async with aioclient.InferenceServerClient(url) as c:
            async def one(i: int) -> None:
                await c.infer(model, [text_input([picks[i]])], parameters=parameters, client_timeout=120)
            return await warm_then_load(one, len(picks), warmup, conc)

    return asyncio.run(run())


def tune_trial(manifest, spec, url: str, texts: list[str], counts, error: type[Exception]) -> tuple[dict[int, dict], dict]:
    """`embtrt tune`'s trial of a kind with a measure (Kind.tune_trial): its KindMeasure.trial at each of the spec's
    concurrencies -> ({concurrency: req/s, p50, p99}, {} : no bands); `error` is raised where requests failed."""
    from ..common.plugins import implementation

    m = implementation(manifest.model_kind, "measure")(url, manifest.name)
    out: dict[int, dict] = {}
    for conc in spec.concurrency:
        load = m.trial(texts, conc, spec.requests, spec.warmup)
        if load.failures:
            raise error(f"trial requests failed: {[f.message[:200] for f in load.failures[:2]]}", "see the tritonserver log")
        f = figures(load)
        out[conc] = {"req_per_s": round(f["req_per_s"], 2), "p50_ms": f["p50_ms"], "p99_ms": f["p99_ms"]}
    return out, {}


class KindReport(Verdict):
    """`embtrt verify` of a kind's deployment: the gate's verdict or the comparison with another
    deployment, and the under-load check; figures start with the kind's name."""

    def __init__(self, kind: Kind) -> None:
        super().__init__({"kind": kind.name})

    def as_dict(self, lines: bool = True) -> dict:
        return {"kind": self.figures["kind"], "passed": self.passed, "failures": list(self.failures),
                **({"lines": list(self.lines)} if lines else {}), **self.figures}


class KindMeasure:
    """What a kind's verify needs (each kind writes the methods that raise here)."""

    kind: Kind
    value = ""              # what one row holds, in messages: "score", "weight"
    beside = ""             # the under-load check's background, in its line

    def __init__(self, url: str, model: str) -> None:
        self.url, self.model = url, model

    def read(self) -> None:
        """The served model's buckets, precision (and what else it needs) -> self.buckets, self.precision."""
        raise NotImplementedError

    def served(self, texts: list[str], url: str, model: str) -> Any: raise NotImplementedError   # its outputs on the corpus
    def described(self, texts: list[str]) -> str: raise NotImplementedError   # what was sent, in the first line
    def against(self, rep: KindReport, got: Any, other: Any, where: tuple[str, str]) -> float: raise NotImplementedError
    def gate(self, reference: Path, texts: list[str], got: Any, trust_remote_code: bool) -> Verdict: raise NotImplementedError
    def limit(self) -> tuple[float, str]: raise NotImplementedError   # (bound of a row's difference, its unit)
    def groups(self, texts: list[str]) -> list[int]: raise NotImplementedError   # items per group (a query's documents)
    def unloaded(self, got: Any) -> np.ndarray: raise NotImplementedError   # the rows the load must equal
    def error(self, got: np.ndarray, base: np.ndarray) -> float: raise NotImplementedError
    # one call of `count` items from item `first` (group `group`) -> its rows; and the background load, if any
    async def call(self, client, texts: list[str], group: int, first: int, count: int) -> np.ndarray: raise NotImplementedError
    def background(self, client, texts: list[str], concurrency: int) -> list[Load]: return []
    # `embtrt tune`'s trial: the kind's bench requests at `conc` (measure.tune)
    def trial(self, texts: list[str], conc: int, requests: int, warmup: int) -> Load: raise NotImplementedError

    @classmethod
    def verify(cls, url: str, model: str, reference: Path | None, texts: list[str], *, under_load: bool = False,
               concurrency: int = 16, against: tuple[str, str] | None = None,
               log: Callable[[str], None] = print, trust_remote_code: bool = False) -> KindReport:
        m = cls(url, model)
        m.read()
        rep = KindReport(m.kind)
        got = m.served(texts, url, model)
        log(f"{model} at {url}: {m.described(texts)}")
        if against is not None:
            worst = m.against(rep, got, m.served(texts, *against), against)
            rep.figures["against"] = {"url": against[0], "model": against[1], "max_abs_diff": worst}
        else:
            if reference is None:
                raise ValueError(f"{m.kind.label}'s gate needs its {m.kind.reference} folder (--reference)")
            rep.add(m.gate(reference, texts, got, trust_remote_code), "gate")   # the gate's lines, failures, figures
        if under_load:
            worst, failed = asyncio.run(m.resend(texts, m.unloaded(got), concurrency))
            limit, unit = m.limit()
            rep.check(worst <= limit and failed == 0,
                      f"under load (concurrency {concurrency}, mixed-size requests{m.beside}): max |{m.value} - "
                      f"unloaded| {worst:.1e}{unit} (limit {limit:.0e}), {failed} failed calls",
                      f"under load: max |{m.value} difference| {worst:.2e}, {failed} failed calls")
            rep.figures["under_load"] = {"concurrency": concurrency, "max_abs_diff": worst, "failed": failed}
        return rep

    async def resend(self, texts: list[str], base: np.ndarray, concurrency: int, seed: int = 0) -> tuple[float, int]:
        """Every item resent in requests of 1, 3, 7 or 16 of a group's items (shuffled) at `concurrency`,
        beside the kind's background load -> (the largest difference from its unloaded row, failed calls)."""
        import tritonclient.grpc.aio as aioclient

        rng = random.Random(seed)
        jobs, start = [], 0   # (group, first item, count)
        for g, size in enumerate(self.groups(texts)):
            i = 0
            while i < size:
                k = rng.choice((1, 3, 7, 16))
                jobs.append((g, start + i, min(k, size - i)))
                i += k
            start += size
        rng.shuffle(jobs)
        got = np.full_like(base, np.nan)

        def keep(j: int, rows: np.ndarray) -> None:
            got[jobs[j][1]:jobs[j][1] + jobs[j][2]] = rows

        async with aioclient.InferenceServerClient(self.url) as c:
            load = Load(lambda j: self.call(c, texts, *jobs[j]), len(jobs), concurrency, on_result=keep)
            background = self.background(c, texts, concurrency)
            await drive(load, background, lead_s=0.2 if background else 0.0)
        missing = int(np.isnan(got).any(axis=1).sum())
        return (self.error(got, base) if not missing else float("inf")), len(load.failures) + missing
