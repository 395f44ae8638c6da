"""--route auto asks the front door's readiness: a definite "not ready" is asked again after 5 s, but
a failed ask (a busy or restarting server answers nothing) is no answer, and the next request after
a quarter second asks again. Before, a failed ask kept auto on token ids for 5 s: a fresh-clone CI run
failed on a coalescing test whose burst fell inside that window while another test loaded the cores."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from embtrt.scale.gateway import length_pools
from embtrt.scale.gateway.length_pools import ROUTE_RECHECK_S, ROUTE_RETRY_S, LengthPools


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _gateway(answers: list):
    """A gateway's routing state over one replica whose readiness answers come from `answers`
    (True / False, or an exception: the ask failed)."""
    asked = []

    class Client:
        async def is_model_ready(self, name):
            asked.append(name)
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    pool = SimpleNamespace(urls=["127.0.0.1:1"])
    model = SimpleNamespace(pool=pool, pools=[pool],
                            upstream=SimpleNamespace(client=lambda url: Client()), served=SimpleNamespace(name="m"))
    gw = SimpleNamespace(route="auto", _route_next=-1e9, model=model)
    return gw, asked


def _route(gw) -> str:
    return asyncio.run(LengthPools.text_route(gw))


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(length_pools.time, "monotonic", c)
    return c


def test_a_failed_readiness_ask_is_asked_again_after_a_quarter_second_not_five(clock):
    gw, asked = _gateway([ConnectionError("busy"), True])
    assert _route(gw) == "ids" and len(asked) == 1
    clock.now += ROUTE_RETRY_S / 2
    assert _route(gw) == "ids" and len(asked) == 1          # one ask at a time, not one per request
    clock.now += ROUTE_RETRY_S
    assert _route(gw) == "frontdoor" and len(asked) == 2    # before: still ids for 5 s
    assert _route(gw) == "frontdoor" and len(asked) == 2    # decided: no more asks


def test_a_front_door_that_answers_not_ready_is_asked_again_after_five_seconds(clock):
    gw, asked = _gateway([False, True])
    assert _route(gw) == "ids"
    clock.now += ROUTE_RETRY_S * 4
    assert _route(gw) == "ids" and len(asked) == 1
    clock.now += ROUTE_RECHECK_S
    assert _route(gw) == "frontdoor" and len(asked) == 2
