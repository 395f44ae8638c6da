"""Session tritonservers that run only while tests need them (#68: the default tier's memory).

A few session fixtures serve one kind's tiny models to two or three test files each (SHARED). Alive from
their first test to the session's end, they added up to most of a worker's memory: the default tier peaked
near 21 of 24 GiB with every one of them running, and one run lost a worker to the OOM killer. Here:

- after each test, a server the next test does not use is stopped (its processes and shared memory gone);
- before a test that uses a stopped one, it starts again on the same ports (the same object, so module
  fixtures holding its URL, a gateway in front of it, keep working).

tests/balance.py keeps the files that share a server next to each other in the collection order (`groups`),
and make test's workers (pytest-xdist, `--dist loadfile`) take such a group as one unit of work
(GroupScheduling below), so that one worker starts the server and runs its files one after the other.
xdist's own `--dist loadgroup` does not do it with this pytest: xdist 3.8 renames the items' node ids to
carry the group, and pytest 9's items ignore it (tests went out one by one). And xdist by default reorders
the units by their number of tests, which undid balance's longest-first order: make test passes
`--no-loadscope-reorder`.
"""

from __future__ import annotations

import pytest
from embtrt.serve.launch import launch

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


GROUPS_FILE = "xdist-groups.json"


def publish(items, folder: str) -> None:
    """On a worker: write the file -> group map where the controller's scheduler reads it (every worker
    collects the same items and writes the same map; written whole, then renamed)."""
    import json
    import os

    path = os.path.join(folder, GROUPS_FILE)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(groups(items), fh)
    os.replace(tmp, path)


def make_scheduler(config, log, folder: str):
    """xdist's file scheduling with one change: the files of one group (a shared server's) are one unit.
    The controller does not collect: the map comes from the workers (publish), read once when
    scheduling starts, after every worker has collected."""
    import json
    import os

    from xdist.scheduler import LoadFileScheduling

    class GroupScheduling(LoadFileScheduling):
        _map: dict | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._map is None:
                try:
                    with open(os.path.join(folder, GROUPS_FILE)) as fh:
                        self._map = json.load(fh)
                except (OSError, ValueError) as exc:   # each file its own unit, as plain loadfile
                    print(f"shared_servers: no file groups ({exc}): scheduling file by file", flush=True)
                    self._map = {}
            f = nodeid.split("::", 1)[0]
            return self._map.get(f, f)

    return GroupScheduling(config, log)


def _running(srv) -> bool:
    return srv.proc is not None and srv.proc.poll() is None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    for name, srv in list(_held.items()):
        if name in item.fixturenames and not _running(srv):
            launch(srv)   # as TritonServer's own start: once more after Triton's transient abort


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    for name, srv in list(_held.items()):
        if _running(srv) and (nextitem is None or name not in nextitem.fixturenames):
            srv.stop()
