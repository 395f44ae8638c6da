"""The two workers' loads (make test: pytest-xdist, a whole file per worker): files are handed out in the
order they are collected, so a long file handed out last leaves the other worker idle until it ends. The
files go out longest first (the files that share a session server as one group: tests/shared_servers.py),
by tests/durations.json (seconds per file, setup and teardown included, per tier: the run's `-m`
expression, from a run with EMBTRT_TEST_DURATIONS=FILE; a file it does not list counts as 0 s, after the
listed ones); tests within a file keep their order.

    EMBTRT_TEST_DURATIONS=tests/durations.json make test-all   # records both tiers' files (merged)
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).with_name("durations.json")
ENV = "EMBTRT_TEST_DURATIONS"


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def tier(config) -> str:
    """The run's tier: its -m expression (make test's "not slow and not deploy"), "" for none."""
    return config.getoption("-m") or ""


def order(items: list, section: str, groups: dict[str, str] | None = None) -> None:
    """Reorder `items` in place: whole groups of files (`groups`: file -> its group, tests/shared_servers.py;
    by default each file its own), longest first by their files' seconds added up; a stable sort: a group's
    files stay together in their order, and equal groups keep theirs."""
    groups = groups or {}
    try:
        seconds = json.loads(DURATIONS.read_text()).get(section) or {}
    except (OSError, ValueError):
        seconds = {}
    unit = {f: groups.get(f, f) for f in (_file(it.nodeid) for it in items)}
    total: dict[str, float] = defaultdict(float)
    for f in set(unit):
        total[unit[f]] += float(seconds.get(f, 0.0))
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(unit[_file(item.nodeid)], i)
    items.sort(key=lambda it: (-total[unit[_file(it.nodeid)]], first[unit[_file(it.nodeid)]]))


class Recorder:
    """Adds up each file's setup, call and teardown seconds as the reports arrive (on the xdist controller,
    from every worker) and writes them as the run's tier, beside FILE's other tiers, when the session ends."""

    def __init__(self, path: str, section: str) -> None:
        self.path, self.section = Path(path), section
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[_file(report.nodeid)] += float(report.duration)

    def pytest_sessionfinish(self, session) -> None:
        try:
            old = json.loads(self.path.read_text())
        except (OSError, ValueError):
            old = {}
        old[self.section] = {k: round(v, 1) for k, v in sorted(self.seconds.items())}
        self.path.write_text(json.dumps(dict(sorted(old.items())), indent=1) + "\n")


def register(config) -> None:
    """The recorder, where asked for and not on an xdist worker (the controller sees every report)."""
    if os.environ.get(ENV) and not os.environ.get("PYTEST_XDIST_WORKER"):
        config.pluginmanager.register(Recorder(os.environ[ENV], tier(config)), "embtrt-durations")
