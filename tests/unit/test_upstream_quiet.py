"""#73: with its upstream down the gateway logged one warning per failed request (211 lines in 10 s); now
one per pool and kind of failure per interval, with how many were held back."""

import logging

from embtrt.scale.gateway.upstream import Quiet


def test_one_warning_per_interval_and_key_with_the_count_held_back(caplog):
    now = [0.0]
    q = Quiet(10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="embtrt.gateway"):
        logged = []
        for i in range(45):          # 45 failures, one every 0.5 s, of pool a; pool b fails once
            now[0] = i * 0.5
            logged.append(q.warn(("down", "a"), "pool %s is unavailable", "a"))
        q.warn(("down", "b"), "pool %s is unavailable", "b")
    assert [i for i, x in enumerate(logged) if x] == [0, 20, 40]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["pool a is unavailable", "pool a is unavailable (19 more like it in the last 10 s)",
                     "pool a is unavailable (19 more like it in the last 10 s)", "pool b is unavailable"], lines
