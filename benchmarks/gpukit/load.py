"""The GPU kit's client side besides the load (embtrt.measure.loadgen): Triton's HTTP/REST inference
protocol for parity and model reloads with a config override (Triton's repository API), standard library
only, and sentence-transformers in process on the same device, dtype and texts for comparison."""

from __future__ import annotations

import http.client
import json
import statistics
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


def percentiles(seconds: list[float]) -> dict:
    if not seconds:
        return {"p50_ms": None, "p99_ms": None}
    ms = sorted(1e3 * s for s in seconds)
    return {"p50_ms": round(statistics.median(ms), 3), "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 3)}


def in_process(model, texts: list[str], batch: int, sync, dry: bool = False, passes: int = 3) -> dict:
    """SentenceTransformer.encode in process, on the same device, dtype and texts as the served cells:
    one text per call (p50 / p99, as a client at concurrency 1 sees it) when `batch` is 1, else batches of
    `batch` texts (texts/s). Warm: every text, and every batch, is encoded once before timing (eager
    PyTorch on CUDA pays for each new shape on first sight: the 2026-12-04 H200 run's single-text p50 of
    8-81 ms was that); then the best of `passes` passes."""
    chunks = [texts[i:i + batch] for i in range(0, len(texts), batch)]
    for c in chunks:
        model.encode(c, batch_size=batch)
    for t in texts if batch == 1 else ():
        model.encode([t])
    sync()
    best: dict = {}
    for _ in range(passes):
        if batch == 1:
            lat = []
            for t in texts:
                t0 = time.perf_counter()
                model.encode([t])
                sync()
                lat.append(time.perf_counter() - t0)
            got = percentiles(lat)
            if not best or got["p50_ms"] < best["p50_ms"]:
                best = {"batch": 1, "texts": len(texts), **got}
        else:
            t0 = time.perf_counter()
            for c in chunks * (1 if dry else 4):
                model.encode(c, batch_size=batch)
            sync()
            rate = len(texts) * (1 if dry else 4) / (time.perf_counter() - t0)
            if not best or rate > best["texts_per_s"]:
                best = {"batch": batch, "texts": len(texts), "texts_per_s": round(rate, 1)}
    return {**best, "passes": passes}
