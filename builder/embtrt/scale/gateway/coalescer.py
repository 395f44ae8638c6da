"""Coalescing of concurrent requests' rows into upstream calls (PoolBatcher). Generic: the
upstream call is any coroutine; nothing here knows Triton."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from . import tracing
from .errors import ApiError


@dataclass
class _Part:
    """One request's rows for one upstream call key (a bucket, or the front door with one option
    set), waiting to go upstream with other requests' rows."""

    rows: list
    fut: asyncio.Future
    since: float
    bulk: bool = False   # one of several parts of a large request: waits for a free slot, behind small requests
    trace: Any = None    # while tracing: (the request's context, its coalesce span)


class PoolBatcher:
    """Coalesces the rows that concurrent requests send to one pool into upstream calls, one key
    (a bucket's encoder, or the front door with one prompt / truncation) per call and at most the
    key's max batch, and scatters the vectors back to each request in order. At most `max_inflight`
    calls are in flight for the pool (the encoders' instances, so that they are not
    oversubscribed): a call goes out at once while a slot is free (a lone request never waits);
    when one frees, the key whose rows have waited longest goes next. A row waits at most
    `window_s` for a slot; after that its key goes out anyway. A call's failure fails the requests
    in it, never those of other calls, and a call of several requests refused as a bad request is
    retried one request per call, so that only the request at fault fails; a request whose client
    went away is dropped from calls not yet sent.

    A large request's parts (`bulk`) queue behind the rows of small requests, never jump the slot
    limit, and hold at most `max_inflight - 1` slots (with two or more): one slot, and so one of the
    server's instances, stays free for the small requests that arrive while large ones run, which
    would otherwise wait in the server's queue behind a whole maximal part (seconds for 32 long
    texts on a CPU). A call on that kept slot carries small requests' rows only.

    `limit(key)`: the most rows of one call; `call(key, rows)`: one upstream call -> one array per row
    (vectors), or a tuple of such arrays (vectors and token counts)."""

    def __init__(self, name: str, window_s: float, max_inflight: int, limit, call) -> None:
        self.name, self.limit, self.call = name, limit, call
        self.window_s, self.max_inflight = window_s, max_inflight
        self.pending: dict[Any, list[_Part]] = {}
        self.inflight = 0
        self.bulk_inflight = 0   # calls in flight that carry a large request's parts
        self.bulk_slots = max(1, max_inflight - 1)
        self.calls = 0
        self.timer: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the submitting loop (get_running_loop costs a getpid)

    async def submit(self, key, rows: list, bulk: bool = False) -> Any:
        loop = self.loop = asyncio.get_running_loop()
        fut = loop.create_future()
        queue = self.pending.setdefault(key, [])
        part = _Part(rows, fut, loop.time(), bulk, tracing.waiting(len(rows), self.name))
        if bulk:
            queue.append(part)
        else:  # ahead of the parts of large requests
            at = next((i for i, p in enumerate(queue) if p.bulk), len(queue))
            queue.insert(at, part)
        self._dispatch()
        return await fut

    def _dispatch(self) -> None:
        loop = self.loop
        assert loop is not None
        for k in list(self.pending):
            live = [p for p in self.pending[k] if not p.fut.done()]  # clients that went away
            if live:
                self.pending[k] = live
            else:
                del self.pending[k]
        now = loop.time()
        while True:  # the key whose rows waited longest first; past its window a small request's rows go anyway
            nxt, small_only = None, False
            bulk_ok = self.bulk_inflight < self.bulk_slots
            for _since, _i, k in sorted((parts[0].since, i, k) for i, (k, parts) in enumerate(self.pending.items())):
                head = self.pending[k][0]
                if self.inflight < self.max_inflight and (bulk_ok or not head.bulk):
                    nxt, small_only = k, not bulk_ok
                    break
                if not head.bulk and now - head.since >= self.window_s:
                    nxt, small_only = k, True
                    break
            if nxt is None:
                break
            self._send(nxt, small_only)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        due = [parts[0].since + self.window_s for parts in self.pending.values() if not parts[0].bulk]
        if due:  # slots are busy: wake up when the oldest small request's rows have waited long enough
            self.timer = loop.call_later(max(0.0, min(due) - now), self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        self._dispatch()

    def _send(self, key, small_only: bool = False) -> None:
        """One call of the key's waiting rows, up to its limit (only small requests' rows when it goes
        out past the slot limit)."""
        queue = self.pending[key]
        limit = self.limit(key)
        take: list[_Part] = []
        n = 0
        while queue and (not take or n + len(queue[0].rows) <= limit) and not (small_only and queue[0].bulk):
            part = queue.pop(0)
            take.append(part)
            n += len(part.rows)
            if part.trace is not None:   # its wait ends
                part.trace[1].end()
        if not queue:
            del self.pending[key]
        bulk = any(p.bulk for p in take)
        self.inflight += 1
        self.bulk_inflight += bulk
        assert self.loop is not None
        self.loop.create_task(self._run(key, take, bulk))

    async def _run(self, key, parts: list[_Part], bulk: bool = False) -> None:
        try:
            try:
                self.calls += 1
                with tracing.coalesced([p.trace for p in parts], {"embtrt.pool": self.name, "embtrt.requests": len(parts),
                                                                  "embtrt.rows": sum(len(p.rows) for p in parts)}):
                    vecs: list = [await self.call(key, [r for p in parts for r in p.rows])]
                groups = [parts]
            except ApiError as exc:
                if exc.status != 400 or len(parts) < 2:
                    raise
                groups = [[p] for p in parts]  # one bad request among several: find it, serve the others
                vecs = []
                for p in parts:
                    try:
                        self.calls += 1
                        vecs.append(await self.call(key, p.rows))
                    except ApiError as one:
                        vecs.append(one)
            for group, vec in zip(groups, vecs):
                start = 0
                for p in group:
                    if not p.fut.done():
                        if isinstance(vec, Exception):
                            p.fut.set_exception(vec)
                        else:
                            p.fut.set_result(_rows_of(vec, start, start + len(p.rows)))
                    start += len(p.rows)
        except Exception as exc:  # ApiError from the pool, or a bug: each request in this call gets it
            for p in parts:
                if not p.fut.done():
                    p.fut.set_exception(exc)
        finally:
            self.inflight -= 1
            self.bulk_inflight -= bulk
            self._dispatch()


def _rows_of(result, start: int, end: int):
    """Rows [start, end) of an upstream result: an array, or a tuple of arrays (or None) with one row per item."""
    if isinstance(result, tuple):
        return tuple(None if x is None else x[start:end] for x in result)
    return result[start:end]
