"""Waiting on an observed state, never on a duration (tests/README.md rule 6): `until` polls a condition and
returns its first truthy value; its timeout only bounds a hang and fails the test naming what never came."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def until(cond: Callable[[], T], timeout_s: float = 30.0, what: str = "the condition", step_s: float = 0.02) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(step_s)
