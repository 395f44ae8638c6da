"""Long texts run off the front door's instance (embtrt_backend.long_rows): the lanes' slots are
shared by the instances (processes) of one server and freed by release or death; a lane answers
every request it takes, in its own thread, and refuses what does not fit. Served end to end on a
real tritonserver: tests/integration/test_long_lane.py."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from embtrt_backend.drain import Drain
from embtrt_backend.long_rows import LongLane, LongRowGate, LongRowsBusy
from waiting import until

BACKEND = Path(__file__).resolve().parents[2] / "python_backend"


def _holder(folder: str) -> subprocess.Popen:
    """Another instance (a process of its own) that takes a slot and keeps it until killed or told."""
    code = ("import sys; from embtrt_backend.long_rows import LongRowGate; "
            f"g = LongRowGate('m', 2, {folder!r}); assert g.take(); print('held', flush=True); "
            "sys.stdin.readline(); g.release(); print('released', flush=True); sys.stdin.readline()")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(BACKEND)})
    assert p.stdout.readline().strip() == "held"
    return p



def _blocked_on_flock() -> bool:
    """This process waits on a flock: /proc/locks lists a blocked request ("->") with its pid."""
    me = str(os.getpid())
    return any("->" in line and "FLOCK" in line and me in line.split() for line in open("/proc/locks"))

def test_instances_minus_one_slots_shared_across_processes_and_freed_by_release_or_death(tmp_path):
    f = str(tmp_path / "slots")
    other = _holder(f)
    try:
        me = LongRowGate("m", 2, f)
        assert me.slots == 1 and not me.take()          # the one slot is the other instance's
        three = LongRowGate("m", 3, f)
        assert three.take() and three.take()             # a second slot; taking again until release is idempotent
        three.release()
        got = []
        waiter = threading.Thread(target=lambda: got.append(LongRowGate("m", 2, f).take(wait=True)))
        waiter.start()
        until(_blocked_on_flock, 30, "the waiter blocked on the slot's lock (/proc/locks)")
        assert not got                                   # a lane waits for the slot
        other.stdin.write("\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "released"
        waiter.join(10)
        assert got == [True]
    finally:
        other.kill()
        other.wait(30)
    killed = _holder(str(tmp_path / "slots2"))
    killed.kill()
    killed.wait(30)
    me = LongRowGate("m", 2, str(tmp_path / "slots2"))
    assert me.take()                                     # a dead instance's slot is free (the kernel drops its lock)
    me.release()
    assert LongRowGate("m", 1, str(tmp_path / "one")).slots == 1   # one instance: its lane still runs


def test_unloading_instances_leave_no_slot_folder_and_never_take_a_held_slot(tmp_path):
    folder = tmp_path / "slots3"
    a, b = LongRowGate("m", 3, str(folder)), LongRowGate("m", 3, str(folder))
    assert a.take() and b.take()
    a.remove()                                      # b still holds its slot: its file stays
    assert sorted(p.name for p in folder.iterdir()) == ["slot-1"]
    c = LongRowGate("m", 3, str(folder))
    assert c.take() and not LongRowGate("m", 3, str(folder)).take()   # two slots again, one held by b
    c.remove()
    b.remove()
    assert not folder.exists()
    assert LongRowGate("m", 3, str(folder)).take()   # a later load makes it again


def test_a_lane_answers_each_request_it_takes_in_its_thread_and_refuses_beyond_its_bound(tmp_path):
    flag = tmp_path / "draining"
    drain = Drain(str(flag), track=True)
    release = threading.Event()
    sent: list = []

    def serve(reqs):
        release.wait(10)
        return [f"vec:{r}" for r in reqs]

    lane = LongLane(LongRowGate("m", 2, str(tmp_path / "s")), serve, lambda r, resp: sent.append((r, resp)),
                    drain, max_pending=3, tokens=10)
    assert lane.is_long([b"x" * 11]) and not lane.is_long([b"x" * 10, "short"])
    assert lane.submit(["a", "b"]) == [] and lane.submit(["c", "d"]) == ["d"]   # 3 held, the 4th refused
    assert isinstance(lane.busy(), LongRowsBusy) and "retry" in str(lane.busy())
    flag.touch()
    assert drain.seen.wait(30), "the drain watcher never saw the marker"
    assert os.listdir(str(flag) + ".busy")              # listed as running while it holds requests
    release.set()
    until(lambda: len(sent) >= 3, 30, "three answers sent")
    assert sent == [("a", "vec:a"), ("b", "vec:b"), ("c", "vec:c")]
    until(lambda: lane.pending == 0 and not os.listdir(str(flag) + ".busy"), 30,
          "the lane idle and unlisted once every answer is sent")


def test_builds_render_the_lanes_default_into_the_front_door_config():
    from embtrt.export.render import LONG_ROW_TOKENS
    from embtrt_backend.long_rows import DEFAULT_TOKENS

    assert LONG_ROW_TOKENS == DEFAULT_TOKENS
