"""Threads sized from the host's cores, per front-door instance: instances x threads = the cores this
process may run on, never more (on 2 cores, two instances of two ONNX Runtime threads and two tokenizer
threads each made every encoder run and batch tokenization wait on threads the other processes held:
benchmarks/results/path-*).

`intra_op_threads` 0 (the build's default, "auto") becomes cores // instances (at least 1); a number
the build set is kept. The tokenizer (Hugging Face tokenizers, whose batch encoding runs on a Rayon
pool) gets the same count: one thread runs it in the calling thread, with no pool at all."""

from __future__ import annotations

import os


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_per_instance(instances: int, cores: int | None = None) -> int:
    return max(1, (cores if cores is not None else host_cores()) // max(1, instances))


def instances_of(model_config: dict) -> int:
    """The instance count of a model's config (its instance groups summed)."""
    return sum(int(g.get("count", 1)) for g in model_config.get("instance_group", [])) or 1


def size_threads(p: dict[str, str], instances: int, cores: int | None = None) -> dict[str, str]:
    """The model's parameters with `intra_op_threads` resolved (auto: threads_per_instance), and the
    tokenizer's pool sized to the same count. Call before the first batch is tokenized (the pool is
    made on first use and keeps its size)."""
    out = dict(p)
    n = int(out.get("intra_op_threads", "0") or 0)
    if n <= 0:
        n = threads_per_instance(instances, cores)
        out["intra_op_threads"] = str(n)
    if n == 1:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    else:
        os.environ.setdefault("RAYON_NUM_THREADS", str(n))
    return out
