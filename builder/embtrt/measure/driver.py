"""The one load driver of bench, the stress matrix and verify: requests at a concurrency, with
background loads beside them, and what came back.

A `Load` is a stream of calls `call(0)`, `call(1)`, ... issued by `concurrency` workers, each
starting its next call when its last one is done: `n` calls, or (n None) until it is stopped or its
`until()` holds. Every call ends as a latency (seconds, the await of the call alone) or as a
`Failure` with its message and kind (serve.wire.classify); the value of a successful call goes to
`on_result(i, value)` after its latency is taken, so that checking a vector is not timed.

`drive(load, background)` runs `load` to its end with background loads running beside it: they
start `lead_s` before it and are stopped when it ends; their calls in flight finish and are recorded.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from ..serve.wire import classify


@dataclass(frozen=True)
class Failure:
    index: int
    kind: str        # one of serve.wire.KINDS
    message: str


class Load:
    def __init__(self, call: Callable[[int], Awaitable[Any]], n: int | None = None, concurrency: int = 1, *,
                 until: Callable[[], bool] | None = None,
                 on_result: Callable[[int, Any], None] | None = None) -> None:
        if concurrency < 1 or (n is not None and n < 0):
            raise ValueError(f"a load needs concurrency >= 1 and n >= 0, got concurrency {concurrency}, n {n}")
        self.call, self.n, self.concurrency, self.until, self.on_result = call, n, concurrency, until, on_result
        self.latencies: dict[int, float] = {}    # index -> seconds, in the order the calls finished
        self.failures: list[Failure] = []        # in the order they happened
        self.sent = 0
        self.seconds = 0.0                       # wall time from the first call to the last one done
        self.peak_in_flight = 0
        self._in_flight = 0
        self._stopped = False

    @property
    def done(self) -> int:
        return len(self.latencies) + len(self.failures)

    @property
    def ok(self) -> int:
        return len(self.latencies)

    def stop(self) -> None:
        """No new calls; those in flight finish."""
        self._stopped = True

    def _more(self) -> bool:
        if self._stopped or (self.n is not None and self.sent >= self.n):
            return False
        return self.until is None or not self.until()

    async def _worker(self) -> None:
        while self._more():
            i = self.sent
            self.sent += 1
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
            t0 = time.perf_counter()
            try:
                value = await self.call(i)
            except Exception as exc:  # recorded with its kind; the caller's report counts and shows it
                self.failures.append(Failure(i, classify(exc), str(exc)))
                continue
            finally:
                self._in_flight -= 1
            self.latencies[i] = time.perf_counter() - t0
            if self.on_result is not None:
                self.on_result(i, value)

    async def run(self) -> "Load":
        t0 = time.perf_counter()
        try:
            await asyncio.gather(*(self._worker() for _ in range(self.concurrency)))
        finally:
            self.seconds = time.perf_counter() - t0
        return self


async def drive(load: Load, background: Sequence[Load] = (), lead_s: float = 0.0) -> Load:
    """Run `load` to its end while the background loads run beside it (started `lead_s` seconds before it,
    stopped when it ends, awaited); -> `load`. Background loads should have n=None: they run until stopped."""
    tasks = [asyncio.ensure_future(b.run()) for b in background]
    try:
        if tasks and lead_s > 0:
            await asyncio.sleep(lead_s)
        await load.run()
    finally:
        for b in background:
            b.stop()
        if tasks:
            await asyncio.gather(*tasks)
    return load
