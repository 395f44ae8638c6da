"""The gateway's upstream transport: one gRPC (asyncio) client per tritonserver URL, and one call
over a pool's replicas, retried on another replica while they are unavailable or their queues are
full. A failure is classified by serve.wire and answered in OpenAI's envelope: the request at fault
400, every replica's queue full 429, anything else 503 once the attempts are spent."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from ...serve import wire
from .config import Pool
from .errors import ApiError
from .metrics import Metrics


class Upstream:
    """The tritonservers behind the gateway, shared by all its models."""

    def __init__(self, attempts: int, timeout_s: float, metrics: Metrics) -> None:
        self.attempts, self.timeout_s, self.metrics = attempts, timeout_s, metrics
        self._clients: dict[str, Any] = {}

    def client(self, url: str):
        c = self._clients.get(url)
        if c is None:
            import tritonclient.grpc.aio as aioclient

            c = self._clients[url] = aioclient.InferenceServerClient(url)
        return c

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()

    async def call(self, pool: Pool, bucket: int, model: str, inputs, output: str,
                   parameters: dict | None = None) -> np.ndarray:
        """One upstream call, retried on other replicas -> its output."""
        return (await self.calls(pool, bucket, model, inputs, (output,), parameters))[0]

    async def calls(self, pool: Pool, bucket: int, model: str, inputs, names: tuple[str, ...],
                    parameters: dict | None = None) -> tuple[np.ndarray, ...]:
        """One upstream call, retried on other replicas -> the outputs asked for, in order."""
        last, reasons = "", set()
        delay = 0.02
        for _attempt in range(self.attempts):
            for url in pool.order():
                t0 = time.perf_counter()
                try:
                    r = await self.client(url).infer(model, inputs, outputs=wire.outputs(*names),
                                                     client_timeout=self.timeout_s, parameters=parameters)
                    self.metrics.of(self.metrics.upstream, pool.name).observe(time.perf_counter() - t0)
                    return tuple(r.as_numpy(n) for n in names)
                except Exception as exc:  # InferenceServerException or a transport error: classify it
                    msg = str(exc)
                    kind = reason(exc)
                    if kind == wire.BAD:
                        raise ApiError(400, f"{model}: {msg}", param="input") from None
                    reasons.add(kind)
                    last = f"{url}: {msg[:300]}"
                    self.metrics.retries.labels(pool.name, kind).inc()
            await asyncio.sleep(wire.backoff(delay))
            delay = min(delay * 2, 1.0)
        if reasons == {wire.QUEUE_FULL}:
            raise ApiError(429, f"every replica of pool {pool.name} (bucket {bucket}) has a full queue; retry later ({last})",
                           type_="rate_limit_error", code="queue_full")
        raise ApiError(503, f"pool {pool.name} (bucket {bucket}, {', '.join(pool.urls)}) is unavailable: {last}",
                       type_="service_unavailable", code="pool_unavailable")


def reason(exc: BaseException) -> str:
    """What a failed upstream call was, for the gateway: wire.BAD (the request at fault, never retried),
    wire.QUEUE_FULL, or wire.UNAVAILABLE for every other kind (retried on another replica; the label of
    embtrt_gateway_upstream_retries)."""
    kind = wire.classify(exc)
    return kind if kind in (wire.BAD, wire.QUEUE_FULL) else wire.UNAVAILABLE
