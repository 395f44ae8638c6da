"""measure/driver.py: the one load driver of bench, the matrix and verify, on fake calls (no server)."""

from __future__ import annotations

import asyncio

import pytest

from embtrt.measure.driver import Load, drive
from embtrt.serve import wire


def test_load_keeps_to_its_concurrency_and_records_every_call():
    in_flight, peak, seen = 0, 0, []

    async def call(i: int) -> int:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0)  # let the other workers start theirs
        await asyncio.sleep(0)
        in_flight -= 1
        return i * 10

    load = Load(call, 25, 4, on_result=lambda i, v: seen.append((i, v)))
    asyncio.run(load.run())
    assert peak == 4 and load.peak_in_flight == 4  # reached, never exceeded
    assert load.sent == load.done == load.ok == 25
    assert sorted(load.latencies) == list(range(25)) and all(s >= 0 for s in load.latencies.values())
    assert sorted(seen) == [(i, i * 10) for i in range(25)]
    assert load.failures == []


def test_a_failed_call_is_recorded_with_its_kind_and_the_load_goes_on():
    async def call(i: int) -> None:
        if i % 5 == 2:
            raise RuntimeError("[StatusCode.UNAVAILABLE] Exceeds maximum queue size")
        if i == 9:
            raise ValueError("bad vector")

    load = Load(call, 20, 3)
    asyncio.run(load.run())
    assert load.sent == 20 and load.ok + len(load.failures) == 20
    assert sorted(f.index for f in load.failures) == [2, 7, 9, 12, 17]
    assert set(load.latencies).isdisjoint(f.index for f in load.failures)
    kinds = {f.index: f.kind for f in load.failures}
    assert kinds[2] == wire.QUEUE_FULL and kinds[9] == wire.OTHER
    assert next(f.message for f in load.failures if f.index == 9) == "bad vector"


def test_an_error_of_the_callers_own_result_hook_is_not_swallowed():
    async def call(i: int) -> int:
        return i

    def check(i: int, v: int) -> None:
        if v == 3:
            raise AssertionError("vector 3 is wrong")

    with pytest.raises(AssertionError, match="vector 3"):
        asyncio.run(Load(call, 10, 2, on_result=check).run())


def test_background_loads_run_beside_the_foreground_and_stop_when_it_ends():
    async def call(i: int) -> None:
        await asyncio.sleep(0)

    bg = [Load(call), Load(call, concurrency=2)]
    at_end: list[int] = []

    def last(i: int, _: None) -> None:
        if fg.done == fg.n:  # the foreground's last call is back: what the background has sent by then
            at_end.extend(b.sent for b in bg)

    fg = Load(call, 30, 2, on_result=last)
    # a background load that were never stopped would run forever: wait_for turns that into a failure
    asyncio.run(asyncio.wait_for(drive(fg, bg), 60))
    assert fg.done == 30
    assert all(b.done > 0 and b.failures == [] for b in bg)  # they ran beside it
    assert all(b.sent == b.done for b in bg)  # stopped, and their calls in flight awaited and recorded
    assert all(b.sent - n <= 3 * b.concurrency for b, n in zip(bg, at_end, strict=True))  # none after the stop but a few in between


def test_a_load_until_a_condition_and_a_lead_for_the_background():
    bg = Load(lambda i: asyncio.sleep(0))

    async def call(i: int) -> None:
        await asyncio.sleep(0)

    fg = Load(call, None, 3, until=lambda: fg.done >= 7 and bg.done >= 5)
    asyncio.run(drive(fg, [bg], lead_s=0.01))
    assert fg.done >= 7 and bg.done >= 5
    assert fg.done <= 7 + 3  # it stops issuing once the condition holds (at most one more per worker)


def test_a_load_refuses_a_concurrency_below_one():
    with pytest.raises(ValueError, match="concurrency"):
        Load(lambda i: asyncio.sleep(0), 5, 0)
