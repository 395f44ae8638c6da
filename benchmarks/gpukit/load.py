"""The GPU kit's client side, standard library only (the GPU host has no tritonclient):
Triton's HTTP/REST inference protocol, a closed-loop load of single-text requests from threads,
model reloads with a config override (Triton's repository API), and sentence-transformers in
process on the same device and dtype for comparison."""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from urllib.parse import urlsplit

import numpy as np


class Http:
    """One keep-alive connection to tritonserver's HTTP endpoint."""

    def __init__(self, url: str, timeout: float = 120.0) -> None:
        u = urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        self.conn.request(method, path, json.dumps(body) if body is not None else None,
                          {"Content-Type": "application/json"} if body is not None else {})
        r = self.conn.getresponse()
        return r.status, r.read()

    def embed(self, model: str, texts: list[str]) -> np.ndarray:
        status, data = self.call("POST", f"/v2/models/{model}/infer", {
            "inputs": [{"name": "TEXT", "shape": [len(texts), 1], "datatype": "BYTES", "data": texts}],
            "outputs": [{"name": "EMBEDDING"}]})
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {data[:300]!r}")
        out = json.loads(data)["outputs"][0]
        return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])

    def close(self) -> None:
        self.conn.close()


def reload_with(url: str, model: str, params: dict[str, str], timeout: float = 300.0) -> None:
    """Load `model` again with these config parameters set (explicit model control)."""
    h = Http(url, timeout)
    try:
        status, data = h.call("GET", f"/v2/models/{model}/config")
        if status != 200:
            raise RuntimeError(f"config of {model}: HTTP {status} {data[:200]!r}")
        cfg = json.loads(data)
        cfg.setdefault("parameters", {}).update({k: {"string_value": v} for k, v in params.items()})
        status, data = h.call("POST", f"/v2/repository/models/{model}/load", {"parameters": {"config": json.dumps(cfg)}})
        if status != 200:
            raise RuntimeError(f"reload of {model} with {params}: HTTP {status} {data[:500]!r}")
    finally:
        h.close()


def closed_loop(url: str, model: str, texts: list[str], concurrency: int, requests: int, seconds: float) -> dict:
    """`concurrency` threads each send one text per request, back to back, until `requests` were sent
    or `seconds` passed: req/s, p50 / p99 latency (ms), errors."""
    lock = threading.Lock()
    state = {"next": 0, "errors": 0, "sample": ""}
    lat: list[float] = []
    deadline = time.perf_counter() + seconds

    def worker() -> None:
        h = Http(url)
        try:
            while True:
                with lock:
                    i = state["next"]
                    if i >= requests or time.perf_counter() > deadline:
                        return
                    state["next"] = i + 1
                t0 = time.perf_counter()
                try:
                    h.embed(model, [texts[i % len(texts)]])
                    with lock:
                        lat.append(time.perf_counter() - t0)
                except Exception as exc:   # counted and reported: a failed request is a result here
                    with lock:
                        state["errors"] += 1
                        state["sample"] = state["sample"] or str(exc)[:200]
                    h.close()
                    h = Http(url)
        finally:
            h.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"requests": len(lat), "req_per_s": round(len(lat) / wall, 1) if wall else 0.0, **percentiles(lat),
            "errors": state["errors"], "error_sample": state["sample"]}


def percentiles(seconds: list[float]) -> dict:
    if not seconds:
        return {"p50_ms": None, "p99_ms": None}
    ms = sorted(1e3 * s for s in seconds)
    return {"p50_ms": round(statistics.median(ms), 3), "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 3)}


def in_process(model, texts: list[str], singles: int, batch: int, seconds: float, sync) -> dict:
    """SentenceTransformer.encode in process: one text per call (p50 / p99, as a client at
    concurrency 1 sees it) and batches of `batch` texts (texts/s). Every text is encoded once before
    timing: eager PyTorch on CUDA pays for each new sequence length on first sight (the 2026-12-04 H200
    run warmed 3 texts and timed 16-43 calls of mostly unseen lengths: single p50 8-81 ms, p99 62-103 ms)."""
    for t in texts:
        model.encode([t])
    sync()
    model.encode(texts[:batch], batch_size=batch)
    lat: list[float] = []
    deadline = time.perf_counter() + seconds / 2
    for i in range(singles):
        t0 = time.perf_counter()
        model.encode([texts[i % len(texts)]])
        sync()
        lat.append(time.perf_counter() - t0)
        if time.perf_counter() > deadline:
            break
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds / 2 or done == 0:
        chunk = [texts[(done + j) % len(texts)] for j in range(batch)]
        model.encode(chunk, batch_size=batch)
        sync()
        done += batch
    return {"single": {"calls": len(lat), **percentiles(lat)},
            "batch": {"size": batch, "texts_per_s": round(done / (time.perf_counter() - t0), 1)}}
