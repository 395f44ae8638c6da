"""The gateway's upstream transport: one gRPC (asyncio) client per tritonserver URL, and one call
over a pool's replicas, retried on another replica while they are unavailable or their queues are
full. A failure is classified by serve.wire and answered in OpenAI's envelope: the request at fault
400, every replica's queue full 429, anything else 503 once the attempts are spent."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from embtrt_backend.drain import MESSAGE as DRAIN_MESSAGE

from ...serve import wire
from . import tracing
from .config import Pool
from .errors import ApiError
from .metrics import Metrics

log = logging.getLogger("embtrt.gateway")


class Quiet:
    """Warnings of one kind at most once per `every_s` each: the first at once, the ones that follow
    within the interval counted and told with the next (a pool that is down fails every request: one
    line per request buried the log)."""

    def __init__(self, every_s: float = 10.0, clock=time.monotonic) -> None:
        self.every_s, self.clock = every_s, clock
        self._last: dict[tuple, float] = {}
        self._held: dict[tuple, int] = {}

    def warn(self, key: tuple, fmt: str, *args) -> bool:
        """Log it (with how many were held back since the last) unless one of `key` was logged within
        `every_s`; -> whether it was logged."""
        now = self.clock()
        if now - self._last.get(key, -1e18) < self.every_s:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        held = self._held.pop(key, 0)
        self._last[key] = now
        log.warning(fmt + (f" ({held} more like it in the last {self.every_s:g} s)" if held else ""), *args)
        return True


class Upstream:
    """The tritonservers behind the gateway, shared by all its models."""

    def __init__(self, attempts: int, timeout_s: float, metrics: Metrics, tls_ca: Path | None = None) -> None:
        self.tls_ca = tls_ca  # gRPC over TLS, the servers' certificates verified against this CA
        self.attempts, self.timeout_s, self.metrics = attempts, timeout_s, metrics
        self._clients: dict[str, Any] = {}
        self.failures = 0  # calls that ended unavailable: a readiness answer older than the last one is stale
        self.quiet = Quiet()

    def client(self, url: str):
        c = self._clients.get(url)
        if c is None:
            import tritonclient.grpc.aio as aioclient

            c = self._clients[url] = aioclient.InferenceServerClient(
                url, ssl=self.tls_ca is not None, root_certificates=str(self.tls_ca) if self.tls_ca else None,
                channel_args=channel_args())
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
                    with tracing.client(model, url, pool.name) as headers:
                        r = await self.client(url).infer(model, inputs, outputs=wire.outputs(*names), headers=headers,
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
        # the details (addresses, gRPC's own words) go to the log; the client gets what it can act on
        where = f"bucket {bucket}" if bucket else "front door"   # the front door's calls have no bucket
        if reasons == {wire.QUEUE_FULL}:
            self.quiet.warn(("full", pool.name), "pool %s (%s): every replica's queue is full: %s", pool.name, where, last)
            raise ApiError(429, "the model's servers are at capacity (a full queue on every replica); retry later",
                           type_="rate_limit_error", code="queue_full", retry_after=1)
        self.failures += 1
        self.quiet.warn(("down", pool.name), "pool %s (%s, %s) is unavailable: %s", pool.name, where,
                        ", ".join(pool.urls), last)
        raise ApiError(503, "the model's servers are unavailable; retry later", type_="service_unavailable",
                       code="pool_unavailable", retry_after=2)


# gRPC's reconnect backoff grows to 120 s by default: a pool that was down for minutes would stay
# unreachable long after it is back. Capped at 1 s (with tritonclient's own message-size and keep-alive
# options, which passing channel_args replaces).
RECONNECT_BACKOFF_MS = 1000


def channel_args() -> list[tuple[str, int]]:
    from tritonclient.grpc import KeepAliveOptions
    from tritonclient.grpc._client import MAX_GRPC_MESSAGE_SIZE

    k = KeepAliveOptions()
    return [("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
            ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
            ("grpc.keepalive_time_ms", k.keepalive_time_ms), ("grpc.keepalive_timeout_ms", k.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", k.keepalive_permit_without_calls),
            ("grpc.http2.max_pings_without_data", k.http2_max_pings_without_data),
            ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS)]


DRAINING = "draining"   # a replica that is shutting down refused the call (python_backend's drain): retried elsewhere


def reason(exc: BaseException) -> str:
    """What a failed upstream call was, for the gateway: wire.BAD (the request at fault, never retried),
    wire.QUEUE_FULL, DRAINING (a replica shutting down refused it: the drains a dashboard counts), or
    wire.UNAVAILABLE for every other kind (retried on another replica; the label of
    embtrt_gateway_upstream_retries)."""
    kind = wire.classify(exc)
    if kind in (wire.BAD, wire.QUEUE_FULL):
        return kind
    return DRAINING if kind == wire.UNAVAILABLE and DRAIN_MESSAGE in str(exc) else wire.UNAVAILABLE
