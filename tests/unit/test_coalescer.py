"""The gateway's coalescer (PoolBatcher) on its own: which rows go into which upstream call, and
how one call's failure is confined. The upstream call is a plain coroutine here that records its
calls and answers each row with its own number, so the scatter back to requests can be checked
exactly; the real gateway runs through tritonserver in tests/integration/test_gateway.py."""

import asyncio

import numpy as np
import pytest

from embtrt.scale.gateway.coalescer import PoolBatcher
from embtrt.scale.gateway.errors import ApiError


class Upstream:
    """Vectors [row, row] for rows that are ints; a row < 0 is refused as a bad request (400), or
    for `status` the call fails with that status; `delay` keeps calls in flight."""

    def __init__(self, delay: float = 0.01, status: int = 400) -> None:
        self.calls: list[tuple] = []
        self.delay, self.status, self.inflight, self.peak = delay, status, 0, 0

    async def __call__(self, key, rows: list) -> np.ndarray:
        self.calls.append((key, list(rows)))
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        try:
            await asyncio.sleep(self.delay)
            if any(r < 0 for r in rows):
                raise ApiError(self.status, f"row {min(rows)} refused")
            return np.asarray([[r, r] for r in rows], dtype=np.float32)
        finally:
            self.inflight -= 1


def _batcher(up: Upstream, limit: int = 8, inflight: int = 1, window_s: float = 1.0) -> PoolBatcher:
    return PoolBatcher("all", window_s, inflight, lambda key: limit, up)


def test_concurrent_requests_share_calls_and_each_gets_its_own_rows_in_order():
    up = Upstream()

    async def main():
        b = _batcher(up, limit=8, inflight=1)
        reqs = [list(range(10 * k, 10 * k + 1 + k % 3)) for k in range(12)]
        outs = await asyncio.gather(*(b.submit("k", r) for r in reqs))
        return reqs, outs

    reqs, outs = asyncio.run(main())
    for rows, out in zip(reqs, outs, strict=True):
        assert out[:, 0].tolist() == rows  # its own rows, in its own order
    assert len(up.calls) < len(reqs)  # coalesced
    assert all(len(rows) <= 8 for _, rows in up.calls)  # never over the key's max batch
    assert up.peak == 1  # never more calls in flight than allowed


def test_a_lone_request_goes_out_at_once():
    """A lone request is answered within a few turns of the event loop, before any timer (the 10 s
    window) could fire: it did not wait for the window. No clock is read."""
    up = Upstream(delay=0.0)

    async def main():
        b = _batcher(up, window_s=10.0)  # a long window: a lone request must not wait for it
        task = asyncio.ensure_future(b.submit("k", [1]))
        turns = 0
        while not task.done() and turns < 100:   # loop turns only; sleep(0) schedules no timer
            await asyncio.sleep(0)
            turns += 1
        done = task.done()
        task.cancel()
        return done, turns, up.calls

    done, turns, calls = asyncio.run(main())
    assert done, f"a lone request still waiting after {turns} turns of the loop: it waits for the window"
    assert calls == [("k", [1])]


def test_keys_never_share_a_call():
    up = Upstream()

    async def main():
        b = _batcher(up, inflight=1)
        await asyncio.gather(*(b.submit(("frontdoor", k % 2, None), [k]) for k in range(10)))

    asyncio.run(main())
    for key, rows in up.calls:
        assert all(r % 2 == key[1] for r in rows)


def test_a_bad_request_in_a_shared_call_fails_alone():
    """The call of several requests is refused (400): each request is retried on its own, so only
    the request at fault gets the error."""
    up = Upstream()

    async def main():
        b = _batcher(up, limit=64, inflight=1)
        first = asyncio.ensure_future(b.submit("k", [0]))  # occupies the only slot: the rest gather behind it
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(b.submit("k", [k])) for k in (1, 2, -3, 4)]
        return list(await asyncio.gather(first, *rest, return_exceptions=True))

    res = asyncio.run(main())
    assert isinstance(res[3], ApiError) and res[3].status == 400 and "-3" in res[3].message
    for k, r in zip((0, 1, 2, 4), (res[0], res[1], res[2], res[4]), strict=True):
        assert r[:, 0].tolist() == [k]
    shared = [rows for _, rows in up.calls if len(rows) > 1]
    assert shared == [[1, 2, -3, 4]]  # they did share a call before the retry one by one


def test_an_unavailable_pool_fails_the_requests_of_that_call_only():
    up = Upstream(status=503)

    async def main():
        b = _batcher(up, limit=2, inflight=1)
        return await asyncio.gather(b.submit("k", [-1]), b.submit("k", [5]), return_exceptions=True)

    bad, good = asyncio.run(main())
    assert isinstance(bad, ApiError) and bad.status == 503  # not retried one by one: it is not a bad request
    assert good[:, 0].tolist() == [5]


def test_a_request_whose_client_went_away_is_left_out_of_calls_not_yet_sent():
    up = Upstream(delay=0.05)

    async def main():
        b = _batcher(up, inflight=1)
        first = asyncio.ensure_future(b.submit("k", [1]))
        await asyncio.sleep(0)
        gone = asyncio.ensure_future(b.submit("k", [2]))
        stay = asyncio.ensure_future(b.submit("k", [3]))
        await asyncio.sleep(0)
        gone.cancel()
        return await first, await stay

    first, stay = asyncio.run(main())
    assert first[:, 0].tolist() == [1] and stay[:, 0].tolist() == [3]
    assert [rows for _, rows in up.calls] == [[1], [3]]


@pytest.mark.parametrize("inflight", [1, 3])
def test_rows_waiting_longer_than_the_window_go_out_even_when_every_slot_is_busy(inflight):
    up = Upstream(delay=0.3)

    async def main():
        b = _batcher(up, inflight=inflight, window_s=0.02)
        busy = [asyncio.ensure_future(b.submit("k", [k])) for k in range(inflight)]
        await asyncio.sleep(0)
        late = asyncio.ensure_future(b.submit("other", [99]))
        while not any(rows == [99] for _, rows in up.calls) and not any(f.done() for f in busy):
            await asyncio.sleep(0.005)   # until the late rows went out, or a busy slot freed (then too late)
        sent = any(rows == [99] for _, rows in up.calls) and not any(f.done() for f in busy)
        await asyncio.gather(late, *busy)
        return sent

    sent = asyncio.run(main())
    assert sent  # went out after its window, before any slot freed


def test_a_call_answering_several_outputs_scatters_each_of_them():
    """The front door answers (vectors, token counts): each request gets its own rows of both."""
    up = Upstream()

    async def call(key, rows):
        vecs = await up(key, rows)
        return vecs, np.asarray(rows, dtype=np.int64).reshape(-1, 1) * 10

    async def main():
        b = PoolBatcher("all", 1.0, 1, lambda key: 8, call)
        reqs = [list(range(10 * k, 10 * k + 1 + k % 3)) for k in range(6)]
        return reqs, await asyncio.gather(*(b.submit("k", r) for r in reqs))

    reqs, outs = asyncio.run(main())
    assert len(up.calls) < len(reqs)
    for rows, (vecs, tokens) in zip(reqs, outs, strict=True):
        assert vecs[:, 0].tolist() == rows and tokens[:, 0].tolist() == [10 * r for r in rows]


class Gated:
    """An upstream whose calls each wait for their own release: the test decides when a call ends."""

    def __init__(self) -> None:
        self.calls: list[list] = []
        self.gates: list[asyncio.Event] = []

    async def __call__(self, key, rows: list) -> np.ndarray:
        self.calls.append(list(rows))
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        return np.asarray([[r, r] for r in rows], dtype=np.float32)


async def _until(up: "Gated", cond) -> None:
    for _ in range(1000):  # loop turns, not time: bounded, and no clock in the test
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never came true; upstream calls {up.calls}")


def test_a_large_requests_parts_wait_for_slots_and_small_requests_go_first():
    up = Gated()

    def until(cond):
        return _until(up, cond)

    async def main():
        b = _batcher(up, limit=2, inflight=1, window_s=0.0)  # a small request's rows may go at once
        big = [asyncio.ensure_future(b.submit("k", [100 + 2 * i, 101 + 2 * i], bulk=True)) for i in range(4)]
        await until(lambda: len(up.calls) == 1)          # one bulk part in the only slot
        small = asyncio.ensure_future(b.submit("k", [7]))
        await until(lambda: len(up.calls) == 2)          # the small one does not wait for the bulk parts
        assert up.calls[1] == [7]
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(up.calls) == 2                        # the other bulk parts never jump the slot limit
        released = 0
        while not all(f.done() for f in big):  # end the calls one by one, oldest first
            up.gates[released].set()
            released += 1
            await until(lambda n=released: len(up.gates) > n or all(f.done() for f in big))
        outs = await asyncio.gather(*big, small)
        return outs

    outs = asyncio.run(main())
    assert [o[:, 0].tolist() for o in outs] == [[100, 101], [102, 103], [104, 105], [106, 107], [7]]
    # the bulk parts went one at a time, in order, each only once the only slot was free again
    assert up.calls == [[100, 101], [7], [102, 103], [104, 105], [106, 107]]


def test_with_two_slots_a_large_request_holds_one_and_the_other_stays_free_for_small_requests():
    """Two slots (two server instances): the bulk parts go one at a time however many wait, and a small
    request arriving meanwhile takes the free slot at once (no window wait: it is 10 s here), alone,
    without bulk rows riding along in it; once the small call ends the slot is free again."""
    up = Gated()

    def until(cond):
        return _until(up, cond)

    async def main():
        b = _batcher(up, limit=4, inflight=2, window_s=10.0)
        big = [asyncio.ensure_future(b.submit("k", [100 + 2 * i, 101 + 2 * i], bulk=True)) for i in range(4)]
        await until(lambda: len(up.calls) == 1)
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(up.calls) == 1                      # the second slot is kept: no second bulk call
        small = asyncio.ensure_future(b.submit("k", [7]))
        await until(lambda: len(up.calls) == 2)
        assert up.calls[1] == [7]                      # the small rows alone, though the limit had room for bulk ones
        up.gates[1].set()
        assert (await small)[:, 0].tolist() == [7]
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(up.calls) == 2                      # the free slot stays free: the bulk parts wait for theirs
        small2 = asyncio.ensure_future(b.submit("k", [8]))
        await until(lambda: len(up.calls) == 3)
        assert up.calls[2] == [8]
        up.gates[2].set()
        while not all(f.done() for f in big):  # end the oldest open call; at most one bulk call is ever open
            open_ = [k for k, g in enumerate(up.gates) if not g.is_set()]
            assert sum(up.calls[k][0] >= 100 for k in open_) <= 1, up.calls
            n = len(up.calls)
            up.gates[open_[0]].set()
            await until(lambda n=n: len(up.calls) > n or all(f.done() for f in big))
        return await asyncio.gather(*big, small2)

    outs = asyncio.run(main())
    assert [o[:, 0].tolist() for o in outs] == [[100, 101], [102, 103], [104, 105], [106, 107], [8]]
    assert [r for c in up.calls if c[0] >= 100 for r in c] == list(range(100, 108))   # in order, each once
