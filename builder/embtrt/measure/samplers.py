"""What a measurement samples beside its load: the CPU seconds and resident memory of process trees
(Linux /proc: tritonserver with its Python-backend stubs, the gateway), this process's own CPU, and
the peak of a reading taken every 50 ms in a thread while a scenario runs (RSS, NVML GPU memory)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable


def _tree_sum(pid: int, value) -> float:
    """Sum of value(stat fields) over a process and all its descendants (Linux /proc), e.g.
    tritonserver with its Python-backend stubs. The fields follow "pid (comm) " in /proc/PID/stat."""
    children: dict[int, list[int]] = {}
    values: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        values[int(entry.name)] = value(fields)
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += values.get(p, 0.0)
        todo += children.get(p, [])
    return total


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process tree."""
    tick = os.sysconf("SC_CLK_TCK")
    return _tree_sum(pid, lambda f: (int(f[11]) + int(f[12])) / tick)


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process tree."""
    page = os.sysconf("SC_PAGE_SIZE")
    return int(_tree_sum(pid, lambda f: int(f[21]) * page))


class PeakSampler:
    """Samples `read()` -> {key: bytes} in a thread while a scenario runs and keeps each key's peak;
    inactive (no thread, no figures) when there is nothing to watch."""

    def __init__(self, read: Callable[[], dict], active: bool, interval_s: float = 0.05) -> None:
        self.read, self.active, self.interval = read, active, interval_s
        self.peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            for k, v in self.read().items():
                self.peak[str(k)] = max(self.peak.get(str(k), 0), v)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "PeakSampler":
        if self.active:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active:
            self._stop.set()
            self._thread.join()

    def mib(self) -> dict[str, float]:
        return {k: round(v / 2**20, 1) for k, v in self.peak.items()}


class PeakRss(PeakSampler):
    """The watched process trees' peak resident memory, by label."""

    def __init__(self, pids: dict[str, int], interval_s: float = 0.05) -> None:
        super().__init__(lambda: {k: tree_rss_bytes(p) for k, p in pids.items()}, bool(pids), interval_s)


class GpuPeak(PeakSampler):
    """Peak used memory of each GPU (NVML), by index; nothing where there is no NVML or GPU."""

    def __init__(self, interval_s: float = 0.05) -> None:
        handles: list = []
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no nvidia-ml-py, no driver, no GPU: CPU host
            handles = []
        super().__init__(lambda: {i: pynvml.nvmlDeviceGetMemoryInfo(h).used for i, h in enumerate(handles)},
                         bool(handles), interval_s)
