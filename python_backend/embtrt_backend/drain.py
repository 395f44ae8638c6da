"""Draining a server without a single "unknown model": the models clients call first refuse new
requests with UNAVAILABLE once a marker file exists, and say which of their calls are still running.

Triton 2.51's own SIGTERM handling stops the schedulers, then unloads every model while its gRPC
endpoint still answers: a client that sends meanwhile gets NOT_FOUND ("Request for unknown model"),
which clients do not retry, and the BLS calls of a front-door request in flight are refused as well.
So whoever stops the server (`embtrt serve`, a pod's preStop hook) creates the file named by
EMBTRT_DRAIN_FILE first:

- every entry model (the front doors, the bucket ensembles' tokenizers) answers each new request
  UNAVAILABLE "draining", which EmbeddingClient, the gateway and gRPC clients retry elsewhere;
- an entry model whose execute() was running when the file appeared, and the ensembles' poolers
  (the last step of a request in flight) while they run, write `<file>.busy/<pid>` until the call
  returns, so the stopper knows when nothing is left in flight (Triton's metrics count queued
  requests, not running ones, and a refusal counts as a success) and can stop tritonserver
  without unloading anything;
- every such instance registers at start (`<file>.instances/<pid>-<n>`, holding its process's start
  time) and, once its watcher has
  seen the file and listed what it runs, acknowledges it (`<file>.seen/<pid>-<n>`): the stopper
  waits for every living instance's acknowledgement before it reads the listing, so that a stub not
  scheduled for a while (a loaded host) cannot have its running call read as idle.

The check is one stat() per execute() call and a 50 ms poll in one daemon thread per model instance.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

ENV = "EMBTRT_DRAIN_FILE"
MESSAGE = "the server is draining (shutting down): retry the request on another replica"
POLL_S = 0.05


def refusals(pb_utils, n: int) -> list:
    """The responses of an entry model's call refused while draining: UNAVAILABLE, in MESSAGE's words."""
    return [pb_utils.InferenceResponse(error=pb_utils.TritonError(MESSAGE, pb_utils.TritonError.UNAVAILABLE))
            for _ in range(n)]


def busy_dir(flag: str) -> str:
    return flag + ".busy"


def instances_dir(flag: str) -> str:
    """Where each tracking instance registers at start (its pid first in the name)."""
    return flag + ".instances"


def seen_dir(flag: str) -> str:
    """Where each tracking instance acknowledges the marker, under its registered name."""
    return flag + ".seen"


_NAMES = itertools.count()


def _touch(d: str, name: str, text: str = "") -> None:
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "w") as f:
        f.write(text)


def stat_fields(pid: int | str = "self") -> list[str]:
    """/proc/PID/stat's fields from the state (its 3rd) on, past the name (which may hold spaces and ')');
    [] where there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def started(pid: int | str = "self") -> str:
    """The process's start time (/proc/PID/stat's 22nd field, clock ticks since boot; "" where there is none):
    with the pid, it names the process, whose pid a later one may take (a restarted container's)."""
    return next(iter(stat_fields(pid)[19:20]), "")


class Drain:
    """The marker file's state for one model instance. `path` None (EMBTRT_DRAIN_FILE unset): never draining."""

    def __init__(self, path: str | None = None, track: bool = False) -> None:
        self.path = path if path is not None else (os.environ.get(ENV) or None)
        self._busy = 0
        self._marked: str | None = None
        self._lock = threading.Lock()
        self.seen = threading.Event()   # the watcher has seen the marker (and listed a running call, if any)
        if track and self.path is not None:
            self.name = f"{os.getpid()}-{next(_NAMES)}"
            # before the model is ready, the stopper waits for it; its start time tells it from a later process
            # given the same pid
            _touch(instances_dir(self.path), self.name, started())
            threading.Thread(target=self._watch, name="embtrt-drain", daemon=True).start()

    def draining(self) -> bool:
        return self.path is not None and os.path.exists(self.path)

    def begin(self) -> bool:
        """At the start of an entry model's execute() call: False when draining (refuse the call's
        requests). Busy is set before the marker is looked at, so a call the watcher sees idle has not
        begun."""
        with self._lock:
            self._busy += 1
        if self.draining():
            # uncounted as any call ends: the watcher may have listed it meanwhile (the marker's stat()
            # lets its thread run), and a listing left behind holds the drain to its timeout
            self.end()
            return False
        return True

    def guard(self, pb_utils, requests, run):
        """An entry model's execute(): run(requests) while listed as running, or every request refused
        while draining (retried elsewhere)."""
        if not self.begin():
            return refusals(pb_utils, len(requests))
        try:
            return run(requests)
        finally:
            self.end()

    def enter(self) -> None:
        """At the start of a call that is never refused (an ensemble's last step: its request is in
        flight): busy, and listed at once when the marker is already there."""
        with self._lock:
            self._busy += 1
            if self._marked is None and self.draining():
                self._mark()

    def end(self) -> None:
        with self._lock:
            self._busy -= 1
            if self._busy == 0 and self._marked is not None:
                Path(self._marked).unlink(missing_ok=True)
                self._marked = None

    def _mark(self) -> None:
        d, name = busy_dir(self.path), str(os.getpid())
        _touch(d, name)
        self._marked = os.path.join(d, name)

    def _watch(self) -> None:
        stop = threading.Event()
        while not stop.wait(POLL_S):
            if not self.draining():
                continue
            with self._lock:
                if self._busy > 0 and self._marked is None:
                    self._mark()
            _touch(seen_dir(self.path), self.name)   # listed: the stopper may read the listing now
            self.seen.set()
            return  # draining is for good: a later call is refused, or lists itself (enter)
