"""The tokenizer's threads sized from the host's cores, per model instance: instances x threads = the cores this
process may run on, never more (Hugging Face tokenizers encodes a batch on a Rayon pool of one thread per core
by default: two front-door instances on 2 cores made four, each batch tokenization waiting on threads the other
processes held). One thread runs it in the calling thread, with no pool at all.

The encoder's threads stay the runtime's (ONNX Runtime: the cores; OpenVINO: a stream per core; PyTorch: its
default) unless the build sets `intra_op_threads` (`--ort-threads`): measured on 2 cores with two instances,
one ONNX Runtime thread each served 1.28x the one-text requests of a tiny model at concurrency 64, but a lone
long text ran on one core: MiniLM's mixed lengths at concurrency 1 fell to 0.80x (docs/performance.md). Which
matters is the deployment's: `embtrt tune` measures it (knob front.intra_op_threads)."""

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
    """The tokenizer's pool sized for this model's instances (call before the first batch is tokenized: the
    pool is made on first use and keeps its size); the parameters returned as given."""
    n = threads_per_instance(instances, cores)
    if n == 1:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    else:
        os.environ.setdefault("RAYON_NUM_THREADS", str(n))
    return dict(p)
