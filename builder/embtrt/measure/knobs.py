"""The knobs `embtrt tune` turns, as data: which models each one sets and the values it tries, how a
value is written into a model config (Triton's JSON form), and what the repository's configs set now."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from ..errors import SpecError
from ..repository.budget import RUN_OVERHEAD_TOKENS, budget_models, budget_values
from ..repository.manifest import Manifest

BUDGET = "budget.max_batch_tokens"   # the token budget: batch sizes of every bucket model and the front door's chunking
# The fixed cost of one encoder run the front door's chunking weighs against padding, in tokens: a
# property of the serving host's speed, so measured here by throughput, never timed at build time.
RUN_OVERHEAD_VALUES = (2, 8, 32, 128)


@dataclass(frozen=True)
class Knob:
    name: str
    models: tuple[str, ...]
    values: tuple[Any, ...]


def knobs_for(manifest: Manifest, repo: Path) -> list[Knob]:
    name = manifest.name
    spec = manifest.spec
    mb = manifest.max_batch_size
    front = (name,)
    out: list[Knob] = []
    pads = manifest.target == "tensorrt" or (manifest.target == "python-torch" and spec.get("device") == "cuda"
                                             and spec.get("cuda_graphs", True))
    if not pads:   # fixed shapes (TensorRT plans, CUDA graphs) pad every row to its bucket: nothing to weigh
        out.append(Knob("front.run_overhead_tokens", front, RUN_OVERHEAD_VALUES))
    out += [Knob("front.instances", front, (1, 2, 3)),
            Knob("front.max_queue_delay_us", front, (0, 500, 2000, 5000)),
            Knob("front.preferred_batch_sizes", front, (tuple(spec["preferred_batch_sizes"]), (mb,), (max(1, mb // 4), mb)))]
    bls = manifest.router_encoder == "bls" or manifest.target in ("tensorrt", "onnxruntime")
    if not bls:   # encoder threads matter where the front door runs the encoder itself
        out.append(Knob("front.intra_op_threads", front, (0, 1, 2)))
    # the budget knob: embedders only (a reranker's / sparse encoder's budget is baked into its front
    # door's plan), and not TensorRT (engines fix their batch range: the budget needs a rebuild there)
    if manifest.model_kind.length_pools and manifest.target != "tensorrt":
        values = budget_values(manifest)
        if len(values) > 1:
            models = tuple(budget_models(manifest, {p.parent.name for p in Path(repo).glob("*/config.pbtxt")}))
            out.append(Knob(BUDGET, models, values))
    if bls:
        encoders = tuple(manifest.models.encoders)
        out += [Knob("encoder.instances", encoders, (1, 2)),
                Knob("encoder.max_queue_delay_us", encoders, (0, 500, 2000))]
    return out


def apply_setting(cfg: dict, knob: str, value: Any) -> dict:
    """A model config (Triton's JSON form) with one knob set."""
    cfg = copy.deepcopy(cfg)
    what = knob.split(".", 1)[1]
    if what == "instances":
        cfg["instance_group"][0]["count"] = int(value)
    elif what == "max_queue_delay_us":
        cfg.setdefault("dynamic_batching", {})["max_queue_delay_microseconds"] = str(int(value))
    elif what == "preferred_batch_sizes":
        mb = int(cfg.get("max_batch_size", 0))
        cfg.setdefault("dynamic_batching", {})["preferred_batch_size"] = [int(v) for v in value if int(v) <= mb] or [mb]
    elif what in ("intra_op_threads", "run_overhead_tokens"):
        cfg.setdefault("parameters", {})[what] = {"string_value": str(int(value))}
    else:
        raise SpecError(f"unknown knob {knob}")
    return cfg


def baseline(knobs: list[Knob], manifest: Manifest, base: dict[str, dict]) -> dict[str, Any]:
    """The settings the repository has now (its configs as the server has them), in knob terms."""
    out: dict[str, Any] = {}
    for k in knobs:
        if k.name == BUDGET:
            out[k.name] = int(manifest.max_batch_tokens or k.values[0])
            continue
        cfg = base[k.models[0]]
        what = k.name.split(".", 1)[1]
        db = cfg.get("dynamic_batching", {})
        if what == "instances":
            out[k.name] = int(cfg["instance_group"][0]["count"])
        elif what == "max_queue_delay_us":
            out[k.name] = int(db.get("max_queue_delay_microseconds", 0))
        elif what == "preferred_batch_sizes":
            out[k.name] = tuple(int(v) for v in db.get("preferred_batch_size", []))
        elif what == "intra_op_threads":
            out[k.name] = int(cfg.get("parameters", {}).get("intra_op_threads", {}).get("string_value", "0"))
        elif what == "run_overhead_tokens":
            out[k.name] = int(cfg.get("parameters", {}).get(what, {}).get("string_value", str(RUN_OVERHEAD_TOKENS)))
    return out
