"""The front door's own timers, behind a flag (the config parameter `stage_timers`, off by default):
where one execute() spends its time, stage by stage, as Triton's statistics cannot see inside it.

    clock.start()                    at the top of execute()
    clock.mark("tokenize")           the time since the last mark goes to that stage
    clock.flush(requests, rows)      at the end: the execute's stages, counts and totals kept

Stages, in the order a request meets them: read (its input tensors), parse (decode, options), tokenize,
plan (length buckets, chunks), pad (the encoder's feeds), encode (the encoder runs), pool (pooling,
normalization, a kind's `after`), finish (each request's outcome: options, vector types), respond
(the response tensors). A stage may be marked several times in one execute (pad and encode once per
chunk); the sums are kept. Off, `NULL` is used: its marks do nothing.

`totals()` gives the sums since load; the router exports them as Triton custom metrics
(embtrt_frontdoor_stage_seconds_total{stage}, ..._executions_total, ..._requests_total,
..._rows_total) on the server's metrics port. Plain Python, tested without Triton.
"""

from __future__ import annotations

import time

STAGES = ("read", "parse", "tokenize", "plan", "pad", "encode", "pool", "finish", "respond")


class NullClock:
    enabled = False

    def start(self) -> None:
        pass

    def mark(self, stage: str) -> None:
        pass

    def add_rows(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass

    def flush(self, requests: int, rows: int = 0) -> None:
        pass


NULL = NullClock()


class StageClock(NullClock):
    """The stage timers. An execute's own marks are per thread (the long-text lane runs executes on a
    thread of its own beside the instance's), its sums kept under a lock."""

    enabled = True

    def __init__(self, sink=None, record: bool = False) -> None:
        import threading

        self.total_ns = dict.fromkeys(STAGES, 0)    # since load
        self.executions = self.requests = self.rows = 0
        self.sink = sink                            # called with (stage ns of this execute, requests, rows)
        self.record = record                        # keep each mark's (stage, start, end): the front door's spans
        self._local = threading.local()
        self._lock = threading.Lock()

    @property
    def ns(self) -> dict[str, int]:
        """This thread's current execute's stage times."""
        local = self._local
        if not hasattr(local, "ns"):
            local.ns, local.last, local.rows = dict.fromkeys(STAGES, 0), time.perf_counter_ns(), 0
            local.t0, local.segments = local.last, []
        return local.ns

    def start(self) -> None:
        ns = self.ns
        for k in ns:
            ns[k] = 0
        local = self._local
        local.rows = 0
        local.last = local.t0 = time.perf_counter_ns()
        local.segments = []

    def mark(self, stage: str) -> None:
        now = time.perf_counter_ns()
        local = self._local
        self.ns[stage] += now - local.last
        if self.record:
            local.segments.append((stage, local.last, now))
        local.last = now

    def recorded(self) -> tuple[int, list, int]:
        """This thread's current execute: its start, its marks (stage, start, end) in perf_counter ns
        (kept only with `record`) and its encoder rows."""
        self.ns   # noqa: B018 (this thread's state, made on first use)
        local = self._local
        return local.t0, local.segments, local.rows

    def add_rows(self, n: int) -> None:
        """The encoder rows this execute made (the request core's count)."""
        self.ns   # noqa: B018 (this thread's state, made on first use)
        self._local.rows += n

    def flush(self, requests: int, rows: int = 0) -> None:
        ns, rows = self.ns, rows or self._local.rows
        with self._lock:
            for k, v in ns.items():
                self.total_ns[k] += v
            self.executions += 1
            self.requests += requests
            self.rows += rows
        if self.sink is not None:
            self.sink(ns, requests, rows)

    def close(self) -> None:
        """The sink's last push (the model's finalize)."""
        close = getattr(self.sink, "close", None)
        if close is not None:
            close()

    def totals(self) -> dict:
        with self._lock:
            return {"stage_seconds": {k: v / 1e9 for k, v in self.total_ns.items()}, "executions": self.executions,
                    "requests": self.requests, "rows": self.rows}


class TritonMetrics:
    """The clock's sink into Triton's custom metrics (pb_utils.MetricFamily, Triton >= 23.05): counters
    on the server's metrics endpoint, labelled by model (and stage).

    Each metric update is a message from the stub to tritonserver (about 75 us each, measured: a dozen
    per execute doubled a lone request's latency), so executes only add to sums here, and a thread pushes
    what changed every `interval_s` (the metrics lag the traffic by at most that)."""

    def __init__(self, pb_utils, model: str, interval_s: float = 0.2) -> None:
        import threading

        fam = pb_utils.MetricFamily
        stage = fam(name="embtrt_frontdoor_stage_seconds_total",
                    description="Seconds the front door's execute() spent per stage (stage_timers on)", kind=fam.COUNTER)
        self.stage = {s: stage.Metric(labels={"model": model, "stage": s}) for s in STAGES}
        counts = {n: fam(name=f"embtrt_frontdoor_{n}_total", description=f"Front door {n} (stage_timers on)",
                         kind=fam.COUNTER) for n in ("executions", "requests", "rows")}
        self.counts = {n: f.Metric(labels={"model": model}) for n, f in counts.items()}
        self.families = [stage, *counts.values()]   # kept alive: a collected family drops its metrics
        self.pending: dict[str, float] = {}
        self.lock = threading.Lock()
        self.interval = interval_s
        self._stop = threading.Event()
        self._warned = False
        self._thread = threading.Thread(target=self._push_forever, daemon=True, name="embtrt-stage-metrics")
        self._thread.start()

    def __call__(self, ns: dict, requests: int, rows: int) -> None:
        with self.lock:
            p = self.pending
            for s, v in ns.items():
                if v:
                    p[s] = p.get(s, 0.0) + v / 1e9
            p["#executions"] = p.get("#executions", 0.0) + 1
            p["#requests"] = p.get("#requests", 0.0) + requests
            p["#rows"] = p.get("#rows", 0.0) + rows

    def push(self) -> None:
        with self.lock:
            pending, self.pending = self.pending, {}
        for k, v in list(pending.items()):
            try:
                if v:
                    (self.counts[k[1:]] if k.startswith("#") else self.stage[k]).increment(v)
            except Exception:
                with self.lock:   # not pushed: kept for the next push
                    for kk, vv in pending.items():
                        self.pending[kk] = self.pending.get(kk, 0.0) + vv
                raise
            del pending[k]

    def _push_forever(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.push()
            except Exception as exc:  # noqa: BLE001 (said once; the sums stay pending and the next push retries)
                if not self._warned:
                    print(f"embtrt front door: stage metrics not pushed: {type(exc).__name__}: {exc}", flush=True)
                    self._warned = True

    def close(self) -> None:
        """The last sums pushed, the thread stopped (the model's finalize)."""
        self._stop.set()
        self._thread.join(timeout=2)
        try:
            self.push()
        except Exception:  # noqa: BLE001 (the server is unloading the model: nothing left to report to)
            pass
