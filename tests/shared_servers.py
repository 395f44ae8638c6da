"""Session tritonservers that run only while tests need them (#68: the default tier's memory).

A few session fixtures serve one kind's tiny models to two or three test files each (SHARED). Alive from
their first test to the session's end, they added up to most of a worker's memory: the default tier peaked
near 21 of 24 GiB with every one of them running, and one run lost a worker to the OOM killer. Here:

- the files that use one of these servers form one xdist group (`--dist loadgroup`: one worker runs them one
  after another; a file that uses none is a group of its own, as `--dist loadfile` had it);
- after each test, a server the next test does not use is stopped (its processes and shared memory gone);
- before a test that uses a stopped one, it starts again on the same ports (the same object, so module
  fixtures holding its URL, a gateway in front of it, keep working).

Run serially (JOBS=1, one file) the same holds: tests/balance.py keeps each group's files together.
"""

from __future__ import annotations

import pytest

SHARED = ("rerank_server", "classifier_server", "multivector_server", "clip_server", "splade_server", "ov_server")
_held: dict = {}   # fixture name -> its TritonServer, while the session fixture is set up


def hold(name: str, srv) -> None:
    _held[name] = srv


def release(name: str) -> None:
    _held.pop(name, None)


def _file(item) -> str:
    return item.nodeid.split("::", 1)[0]


def groups(items) -> dict[str, str]:
    """Each test file's group: the shared server its tests use (the first in SHARED order), else the file."""
    used: dict[str, str] = {}
    for item in items:
        for name in SHARED:
            if name in getattr(item, "fixturenames", ()):
                used.setdefault(_file(item), name)
                break
    return {_file(it): used.get(_file(it), _file(it)) for it in items}


def mark(items) -> dict[str, str]:
    """Every test marked with its file's xdist group (loadgroup runs an unmarked test on any worker)."""
    by_file = groups(items)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(name=by_file[_file(item)]))
    return by_file


def _running(srv) -> bool:
    return srv.proc is not None and srv.proc.poll() is None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    for name, srv in list(_held.items()):
        if name in item.fixturenames and not _running(srv):
            srv.start()
            srv.wait_ready()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    for name, srv in list(_held.items()):
        if _running(srv) and (nextitem is None or name not in nextitem.fixturenames):
            srv.stop()
