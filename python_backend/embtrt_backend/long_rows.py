"""Long texts never starve short ones on one tritonserver: they run off the front door's instance.

A Triton Python model's execute() holds its instance until it returns: four 16K-token texts sent at
once held both front-door instances for tens of seconds, and every short request queued behind
them (or batched with them) waited as long, some until Triton's queue timeout refused them. Triton
2.51's Python backend lets a non-decoupled model answer each request through its response sender
(exactly one response, flagged final) and return None from execute(): the instance is free at once
(docs/reliability.md, measured). So the front door, for a model whose texts can be long:

- answers a call's short requests itself, as before, through their response senders;
- hands the requests holding a long text (more UTF-8 bytes than `long_row_tokens`, which bounds
  their tokens: every token of a WordPiece or byte-level BPE vocabulary spans at least a byte) to
  a worker thread of its instance (the LongLane), and returns: the next call starts at once;
- the lanes of a server's instances run at most `instances - 1` long calls at once (an exclusive
  flock on one of that many slot files; the kernel frees it if the process dies), so long texts
  never take every core's worth of front door; a lane waits for a slot in its own thread;
- a lane holds at most `max_pending` requests; beyond that a long request is refused at once with
  UNAVAILABLE (retried by EmbeddingClient and the gateway), never queued without bound.

Only encoders that may run from two threads at once take part (ONNX Runtime sessions, BLS calls);
the others (OpenVINO's infer requests, PyTorch) keep long texts in execute().
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import tempfile
import threading
from typing import Callable

from .drain import ENV as DRAIN_ENV

DEFAULT_TOKENS = 1024


class LongRowsBusy(RuntimeError):
    """The server's long-text slots are all in use: retry (the call was refused before any work)."""


class LongRowGate:
    """`instances - 1` (at least 1) slots shared by the front-door instances of one server."""

    def __init__(self, model: str, instances: int, folder: str | None = None) -> None:
        self.slots = max(1, instances - 1)
        self._fd: int | None = None
        if folder is None:
            flag = os.environ.get(DRAIN_ENV)   # serve's run folder, removed when it stops
            base = os.path.dirname(flag) if flag else tempfile.gettempdir()
            folder = os.path.join(base, f"embtrt-long-rows-{os.getppid()}-{model}")
        self.folder = folder
        os.makedirs(folder, exist_ok=True)

    def _open(self, k: int) -> int:
        os.makedirs(self.folder, exist_ok=True)   # a sibling instance that unloaded first removed it
        return os.open(os.path.join(self.folder, f"slot-{k}"), os.O_RDWR | os.O_CREAT, 0o600)

    def take(self, wait: bool = False) -> bool:
        """One slot for this caller (idempotent until release); with `wait`, blocks until one is free."""
        if self._fd is not None:
            return True
        for k in range(self.slots):
            fd = self._open(k)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._fd = fd
            return True
        if not wait:
            return False
        fd = self._open(os.getpid() % self.slots)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        """At unload: the slot files no instance holds, then the folder once it is empty, so a plain
        tritonserver leaves nothing in the temporary folder."""
        self.release()
        for k in range(self.slots):
            path = os.path.join(self.folder, f"slot-{k}")
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.unlink(path)
            except BlockingIOError:
                pass   # another instance's lane holds it: that instance removes it
            finally:
                os.close(fd)
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)


class LongLane:
    """One front-door instance's worker for its long requests. `serve(requests)` -> their responses
    (never raises: a failure is each request's error response); `send(request, response)` answers
    one request through its response sender; `drain` (an embtrt_backend.drain.Drain) lists the
    lane's work as running until it is answered."""

    def __init__(self, gate: LongRowGate, serve: Callable, send: Callable, drain=None, max_pending: int = 16,
                 tokens: int = DEFAULT_TOKENS) -> None:
        self.gate, self.serve, self.send, self.drain = gate, serve, send, drain
        self.max_pending, self.tokens = max_pending, tokens
        self.pending = 0
        self._lock = threading.Lock()
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="embtrt-long-lane", daemon=True).start()

    def is_long(self, texts) -> bool:
        """Whether a request's texts (bytes or str) may hold a row over `tokens` tokens."""
        return any(len(t) > self.tokens for t in texts)

    def submit(self, requests: list) -> list:
        """Queues what fits; returns the requests refused (the lane is full) for the caller to answer."""
        with self._lock:
            room = max(0, self.max_pending - self.pending)
            take, refused = requests[:room], requests[room:]
            self.pending += len(take)
        if take:
            if self.drain is not None:
                self.drain.enter()
            self._q.put(take)
        return refused

    def busy(self) -> LongRowsBusy:
        return LongRowsBusy(f"this front-door instance already holds {self.max_pending} requests with texts over "
                            f"{self.tokens} tokens: retry the request, or send long texts to a replica or length pool "
                            "of their own")

    def _run(self) -> None:
        while True:
            job = self._q.get()
            try:
                self.gate.take(wait=True)
                try:
                    responses = self.serve(job)
                finally:
                    self.gate.release()
                for r, resp in zip(job, responses):
                    self.send(r, resp)
            finally:
                with self._lock:
                    self.pending -= len(job)
                if self.drain is not None:
                    self.drain.end()
