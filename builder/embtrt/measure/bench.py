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
import json
import os
import platform
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import orjson

from ..errors import SpecError
from ..repository.manifest import read_manifest


@dataclass
class Target:
    name: str
    kind: str          # triton | openai | inprocess
    url: str = ""
    model: str = ""
    pids: tuple[int, ...] = ()  # server processes to pause while another target is measured
    # request options sent with every request (Triton request parameters; fields of the OpenAI body)
    options: dict = field(default_factory=dict)


class _Paused:
    """SIGSTOP the other targets' servers during one target's scenario: on a small machine an
    idle server that polls (seen: infinity-emb at ~65% of a core while idle) takes CPU from the
    one being measured."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def __enter__(self) -> None:
        import os
        import signal

        for p in self.pids:  # a negative pid names a process group (tritonserver and its stubs)
            try:
                os.killpg(-p, signal.SIGSTOP) if p < 0 else os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass

    def __exit__(self, *exc: object) -> None:
        import os
        import signal

        for p in self.pids:
            try:
                os.killpg(-p, signal.SIGCONT) if p < 0 else os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass


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


def _tree_sum(pid: int, value) -> float:
    """Sum of value(stat fields) over a process and all its descendants (Linux /proc), e.g.
    tritonserver with its Python-backend stubs. The fields follow "pid (comm) " in /proc/PID/stat."""
    children: dict[int, list[int]] = {}
    values: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        values[int(entry.name)] = value(fields)
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += values.get(p, 0.0)
        todo += children.get(p, [])
    return total


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process tree."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    return _tree_sum(pid, lambda f: (int(f[11]) + int(f[12])) / tick)


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process tree."""
    import os

    page = os.sysconf("SC_PAGE_SIZE")
    return int(_tree_sum(pid, lambda f: int(f[21]) * page))


class PeakSampler:
    """Samples `read()` -> {key: bytes} in a thread while a scenario runs and keeps each key's peak;
    inactive (no thread, no figures) when there is nothing to watch."""

    def __init__(self, read: Callable[[], dict], active: bool, interval_s: float = 0.05) -> None:
        import threading

        self.read, self.active, self.interval = read, active, interval_s
        self.peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            for k, v in self.read().items():
                self.peak[str(k)] = max(self.peak.get(str(k), 0), v)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "PeakSampler":
        if self.active:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active:
            self._stop.set()
            self._thread.join()

    def mib(self) -> dict[str, float]:
        return {k: round(v / 2**20, 1) for k, v in self.peak.items()}


class PeakRss(PeakSampler):
    """The watched process trees' peak resident memory, by label."""

    def __init__(self, pids: dict[str, int], interval_s: float = 0.05) -> None:
        super().__init__(lambda: {k: tree_rss_bytes(p) for k, p in pids.items()}, bool(pids), interval_s)


def _pct(lat: list[float], q: float) -> float:
    return float(np.percentile(lat, q)) if lat else float("nan")


def length_buckets(counts: np.ndarray, edges: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Text indices per length bucket label ('<=32', '<=128', ..., '>L' for the rest), plus 'mixed'."""
    out: dict[str, np.ndarray] = {}
    lo = 0
    for e in edges:
        rows = np.nonzero((counts > lo) & (counts <= e))[0]
        if rows.size:
            out[f"<={e}"] = rows
        lo = e
    rest = np.nonzero(counts > lo)[0]
    if rest.size:
        out[f">{lo}"] = rest
    out["mixed"] = np.arange(counts.size)
    return out


class _Triton:
    def __init__(self, t: Target) -> None:
        import tritonclient.grpc.aio as aio

        self.t, self.c = t, aio.InferenceServerClient(t.url)

    async def embed(self, texts: list[str]) -> None:
        import tritonclient.grpc as grpcclient

        from ..serve.client import _output_name, _text_input

        out = _output_name(self.t.options)
        r = await self.c.infer(self.t.model, [_text_input(texts)], client_timeout=120,
                               outputs=[grpcclient.InferRequestedOutput(out)], parameters=self.t.options or None)
        v = r.as_numpy(out)
        if v is None or v.shape[0] != len(texts):
            raise RuntimeError(f"expected {len(texts)} vectors, got {None if v is None else v.shape}")

    async def stats(self) -> dict[str, tuple[int, int, int]]:
        """model -> (request count, queue ns, compute-infer ns), summed over versions."""
        s = await self.c.get_inference_statistics(as_json=True)
        out = {}
        for m in s.get("model_stats", []):
            st = m.get("inference_stats", {})
            out[m["name"]] = (int(st.get("success", {}).get("count", 0)), int(st.get("queue", {}).get("ns", 0)),
                              int(st.get("compute_infer", {}).get("ns", 0)))
        return out

    async def close(self) -> None:
        await self.c.close()


class _OpenAI:
    def __init__(self, t: Target) -> None:
        import aiohttp

        self.t = t
        self.s = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        self.endpoint = t.url.rstrip("/") + "/embeddings"

    async def embed(self, texts: list[str]) -> None:
        # orjson both ways: the load generator shares the cores it measures, and the stdlib's parsing of a
        # float vector cost ~0.07 ms a request more than the gRPC client's binary tensor (2-core EPYC)
        payload = orjson.dumps({"model": self.t.model, "input": texts, **self.t.options})
        async with self.s.post(self.endpoint, data=payload, headers={"content-type": "application/json"}) as r:
            raw = await r.read()
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise RuntimeError(f"HTTP {r.status}: not JSON: {raw[:200]!r}") from None
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {str(body)[:200]}")
            if len(body.get("data", [])) != len(texts):
                raise RuntimeError(f"expected {len(texts)} vectors, got {len(body.get('data', []))}")

    async def stats(self) -> dict:
        return {}

    async def close(self) -> None:
        await self.s.close()


async def _run_one(client, texts: list[str], rows: np.ndarray, concurrency: int, per_req: int, requests: int,
                   warmup: int, seed: int, tokens: np.ndarray) -> tuple[list[float], int, list[str], float, int]:
    """Warm-up requests first (not measured), then `requests` at `concurrency`."""
    rng = random.Random(seed)
    plans = [[int(rows[rng.randrange(rows.size)]) for _ in range(per_req)] for _ in range(requests + warmup)]

    async def drive(batch: list[list[int]], conc: int) -> tuple[list[float], list[str], int]:
        pending = list(reversed(batch))
        lat: list[float] = []
        errors: list[str] = []
        n_tok = 0

        async def worker() -> None:
            nonlocal n_tok
            while pending:
                plan = pending.pop()
                t0 = time.perf_counter()
                try:
                    await client.embed([texts[j] for j in plan])
                except Exception as exc:  # counted and sampled in the report
                    errors.append(str(exc)[:200])
                    continue
                lat.append((time.perf_counter() - t0) * 1e3)
                n_tok += int(tokens[plan].sum())

        await asyncio.gather(*[worker() for _ in range(conc)])
        return lat, errors, n_tok

    if warmup:
        await drive(plans[:warmup], min(concurrency, warmup))
    t0 = time.perf_counter()
    lat, errors, n_tok = await drive(plans[warmup:], concurrency)
    return lat, len(errors), errors[:3], time.perf_counter() - t0, n_tok


def _inprocess(texts: list[str], rows: np.ndarray, per_req: int, requests: int, warmup: int,
               seed: int, tokens: np.ndarray, st_model=None) -> tuple[list[float], float, int]:
    rng = random.Random(seed)
    plans = [[int(rows[rng.randrange(rows.size)]) for _ in range(per_req)] for _ in range(requests + warmup)]
    for p in plans[:warmup]:
        st_model.encode([texts[j] for j in p], batch_size=per_req)
    lat = []
    t0 = time.perf_counter()
    n_tok = 0
    for p in plans[warmup:]:
        s = time.perf_counter()
        st_model.encode([texts[j] for j in p], batch_size=per_req)
        lat.append((time.perf_counter() - s) * 1e3)
        n_tok += int(tokens[p].sum())
    return lat, time.perf_counter() - t0, n_tok


class EncoderInProcess:
    """A repository's encoder in process, on its own ONNX and tokenizer: the hardware line.

    Same tokenizer, same graph and same texts as the served model: one request at a time
    (latency), and length-sorted batches of 32 texts (throughput). `runtime=None` runs ONNX
    Runtime fp32 (spinning threads, its fastest single-text setting); `runtime="repo"` runs the
    repository's own encoder exactly as its front door is configured (e.g. OpenVINO bf16)."""

    def __init__(self, repo: Path, threads: int = 0, runtime: str | None = None) -> None:
        from ..common.backend import backend_lib
        from ..repository.config import parse_config

        text_mod, enc_mod = backend_lib()
        m = read_manifest(repo)
        front = Path(repo) / m.name / "1"
        self.tok = text_mod.TextTokenizer(str(front / "tokenizer.json"), m.max_seq_length, m.pad_id)
        self.names = m.input_names
        if runtime == "repo":
            cfg = parse_config(Path(repo) / m.name / "config.pbtxt")
            params = {k: v.string_value for k, v in cfg.parameters.items()}
            self.enc = enc_mod.encoder_from_parameters(str(front), params)
            self.label = f"{params.get('runtime', 'onnxruntime')} {params.get('precision', 'fp32')}"
        else:
            onnx = front / "model.onnx" if (front / "model.onnx").is_file() else \
                Path(repo) / m.models.encoders[-1] / "1" / "model.onnx"
            self.enc = enc_mod.OrtEncoder(str(onnx), threads, spinning=True)
            self.label = "onnxruntime"

    def embed(self, texts: list[str]) -> None:
        e = self.tok.encode(texts)
        self.enc.run(self.tok.pad(e, list(range(len(texts))), int(e.lengths.max()), self.names))


def _encoder_inprocess(line: EncoderInProcess, texts: list[str], rows: np.ndarray, per_req: int, requests: int, warmup: int,
                   seed: int, tokens: np.ndarray) -> tuple[tuple[list[float], float, int], tuple[list[float], float, int]]:
    rng = random.Random(seed)
    plans = [[int(rows[rng.randrange(rows.size)]) for _ in range(per_req)] for _ in range(requests + warmup)]
    for p in plans[:warmup]:
        line.embed([texts[j] for j in p])
    lat, n_tok = [], 0
    t0 = time.perf_counter()
    for p in plans[warmup:]:
        s = time.perf_counter()
        line.embed([texts[j] for j in p])
        lat.append((time.perf_counter() - s) * 1e3)
        n_tok += int(tokens[p].sum())
    single = (lat, time.perf_counter() - t0, n_tok)
    flat = sorted((j for p in plans[warmup:] for j in p), key=lambda j: tokens[j])
    for i in range(0, len(flat), 32):  # one unmeasured pass: the first run of each new shape is slower
        line.embed([texts[j] for j in flat[i:i + 32]])
    blat = []
    t0 = time.perf_counter()
    for i in range(0, len(flat), 32):
        s = time.perf_counter()
        line.embed([texts[j] for j in flat[i:i + 32]])
        blat.append((time.perf_counter() - s) * 1e3)
    return single, (blat, time.perf_counter() - t0, int(tokens[flat].sum()))


def _result(target: Target, bucket: str, conc: int, per_req: int, sent: int, lat: list[float], errors: int,
            samples: list[str], seconds: float, n_tok: int, triton: dict | None = None) -> Result:
    ok = len(lat)
    if ok + errors != sent:
        raise AssertionError(f"bench bookkeeping: {ok} ok + {errors} errors != {sent} sent")
    secs = max(seconds, 1e-9)
    return Result(target.name, target.kind, bucket, conc, per_req, sent, ok, errors, seconds, ok / secs,
                  ok * per_req / secs, n_tok / secs, _pct(lat, 50), _pct(lat, 95), _pct(lat, 99),
                  max(lat) if lat else float("nan"), samples, triton or {})


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
              rounds: int = 1) -> dict:
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

        st_model = SentenceTransformer(str(inprocess_model), device="cpu")
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
                        one.client_cpu_s, one.rss = _own_cpu_seconds() - own0, mem.mib()
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
    """One target, one round of a scenario -> its measurements (the caller adds CPU and memory)."""
    client = _Triton(t) if t.kind == "triton" else _OpenAI(t)
    try:
        before = await client.stats()
        lat, n_err, samples, secs, n_tok = await _run_one(client, texts, rows, conc, per_req, requests, warmup, seed,
                                                          tokens)
        # Triton updates its statistics just after a response is sent: wait until they include ours.
        want = before.get(t.model, (0, 0, 0))[0] + warmup + len(lat)
        after = await client.stats()
        for _ in range(20):
            if t.kind != "triton" or after.get(t.model, (0, 0, 0))[0] >= want:
                break
            await asyncio.sleep(0.05)
            after = await client.stats()
    finally:
        await client.close()
    if len(lat) + n_err != requests:
        raise AssertionError(f"bench bookkeeping: {len(lat)} ok + {n_err} errors != {requests} sent")
    tri = _triton_delta(before, after, t.model) if t.kind == "triton" else {}
    return _Raw(lat=lat, errors=n_err, samples=samples, seconds=secs, tokens=n_tok, sent=requests, triton=tri)


def machine() -> dict:
    import os

    info: dict[str, object] = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
        info["isa"] = sorted({f for f in flags.split() if f.startswith(("avx512", "amx", "avx2"))})
        mem = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        info["memory_gib"] = round(int(mem.split()[1]) / 2**20, 1)
    except (OSError, StopIteration):
        pass
    return info


def markdown(doc: dict) -> str:
    cpu_keys = sorted({k for r in doc["results"] for k in r.get("cpu_ms_per_req", {})})
    lines = [f"# embtrt bench, {doc['started']}", "",
             f"Machine: {doc['machine'].get('cpu', '?')}, {doc['machine'].get('cpus')} CPUs, "
             f"{doc['machine'].get('memory_gib', '?')} GiB; Python {doc['machine']['python']}", "",
             f"Scenario: {doc['scenario']['requests']} requests of {doc['scenario']['texts_per_request']} text(s) per "
             f"target, bucket and concurrency ({doc['scenario']['warmup']} warm-up requests excluded); "
             f"texts per bucket: {doc['scenario']['bucket_sizes']}", "",
             "| target | bucket | conc | req/s | texts/s | tokens/s | p50 ms | p95 ms | p99 ms | max ms | errors | "
             "Triton queue/compute µs (front door) |" + "".join(f" CPU ms/req {k} |" for k in cpu_keys) +
             (" CPU ms/req total |" if cpu_keys else "") + "".join(f" peak RSS MiB {k} |" for k in cpu_keys) +
             (" CPU ms/req load generator |" if cpu_keys else ""),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|" + "---:|" * (2 * len(cpu_keys) + 2 * bool(cpu_keys))]
    for r in doc["results"]:
        tri = ""
        front = r["triton"].get(next((t["model"] for t in doc["targets"] if t["name"] == r["target"]), ""), None)
        if front:
            tri = f"{front['queue_us']:.0f} / {front['compute_us']:.0f}"
        lines.append(f"| {r['target']} | {r['bucket']} | {r['concurrency']} | {r['req_per_s']:.1f} | "
                     f"{r['texts_per_s']:.1f} | {r['tokens_per_s']:.0f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
                     f"{r['p99_ms']:.1f} | {r['max_ms']:.1f} | {r['errors']} | {tri} |"
                     + "".join(f" {r.get('cpu_ms_per_req', {}).get(k, float('nan')):.2f} |" for k in cpu_keys)
                     + (f" {sum(r.get('cpu_ms_per_req', {}).values()):.2f} |" if cpu_keys else "")
                     + "".join(f" {r.get('peak_rss_mib', {}).get(k, float('nan')):.0f} |" for k in cpu_keys)
                     + (f" {r.get('client_cpu_ms_per_req') or float('nan'):.2f} |" if cpu_keys else ""))
    return "\n".join(lines) + "\n"


def plots(doc: dict, out_dir: Path) -> list[Path]:
    """Per bucket: p50/p95/p99 latency and throughput vs concurrency, one line per target."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    res = doc["results"]
    written = []
    for bucket in dict.fromkeys(r["bucket"] for r in res):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        for target in dict.fromkeys(r["target"] for r in res):
            rows = sorted((r for r in res if r["bucket"] == bucket and r["target"] == target and r["kind"] != "inprocess"),
                          key=lambda r: r["concurrency"])
            if rows:
                xs = [r["concurrency"] for r in rows]
                for q, style in (("p50_ms", "-"), ("p95_ms", "--"), ("p99_ms", ":")):
                    ax1.plot(xs, [r[q] for r in rows], style, marker="o", label=f"{target} {q[:3]}")
                ax2.plot(xs, [r["req_per_s"] for r in rows], marker="o", label=target)
            inproc = [r for r in res if r["bucket"] == bucket and r["target"] == target and r["kind"] == "inprocess"]
            for r in inproc:
                ax1.axhline(r["p50_ms"], color="grey", linestyle="-.", label=f"{target} p50")
                ax2.axhline(r["req_per_s"], color="grey", linestyle="-.", label=target)
        levels = sorted({r["concurrency"] for r in res if r["bucket"] == bucket and r["kind"] != "inprocess"}) or [1]
        ax1.set(xscale="log", yscale="log", xlabel="concurrency", ylabel="latency (ms)", title=f"latency, bucket {bucket}")
        ax2.set(xscale="log", xlabel="concurrency", ylabel="requests/s", title=f"throughput, bucket {bucket}")
        for ax in (ax1, ax2):
            ax.set_xticks(levels)
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax1.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax1.legend(fontsize=6)
        ax2.legend(fontsize=6)
        fig.tight_layout()
        name = "bench_" + bucket.replace("<=", "le").replace(">", "gt") + ".png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(out_dir / name)
    return written


def plots_unavailable() -> str | None:
    """Why the PNG plots cannot be drawn here (matplotlib missing), or None. Asked before a long run."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"matplotlib is not installed ({exc}): pip install 'embtrt[bench]' for the PNG plots"
    return None


def save(doc: dict, out_dir: Path, with_plots: bool = True) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out_dir / "results.md").write_text(markdown(doc))
    return [out_dir / "results.json", out_dir / "results.md", *(plots(doc, out_dir) if with_plots else [])]
