"""Session tritonservers that run only while tests need them (#68: the default tier's memory).

A few session fixtures serve one kind's tiny models to two or three test files each (SHARED). Alive from
their first test to the session's end, they added up to most of a worker's memory: the default tier peaked
near 21 of 24 GiB with every one of them running, and one run lost a worker to the OOM killer. Here:

- after each test, a server the next test does not use is stopped (its processes and shared memory gone);
- before a test that uses a stopped one, it starts again on the same ports (the same object, so module
  fixtures holding its URL, a gateway in front of it, keep working).

tests/balance.py keeps the files that share a server next to each other in the collection order (`groups`),
so that run serially they follow one another. Handing such a group to one pytest-xdist worker
(`--dist loadgroup` with xdist_group marks) does not work with this pytest: xdist 3.8 renames
the items' node ids to carry the group, and pytest 9's items ignore it (the files went to both workers,
the deploy test's two cases ran at once and collided). make test stays on `--dist loadfile`: each worker starts a
shared server once per file that uses it.
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
