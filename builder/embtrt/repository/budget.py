"""The token budget (`max_batch_tokens`): what it sets in a repository, in one place.

A bucket's max batch is the budget's rows of that length, capped by the model's max batch
size: min(max_batch_size, max_batch_tokens // bucket), at least 1. The budget sets nothing
else than batch sizes: every model of the bucket (ensemble, tokenizer, encoder, pooler) takes
that max batch, its preferred sizes and warm-up batches stay within it, and the front door
chunks each bucket's rows by it (`encoder_max_batch_sizes`). So a repository whose encoders
take any batch (ONNX Runtime, OpenVINO, PyTorch) can change its budget by configuration alone:
`with_budget` rewrites the configs (Triton's JSON form, as the repository API loads them);
TensorRT engines fix their batch range at build time and need a rebuild instead.

Beside it, the front door's chunking weighs padding against the fixed cost of one encoder run,
in tokens of compute (`run_overhead_tokens`). A build writes one documented value, never a timing
of the build machine: the same folder and flags give the same repository, and a value that depends
on the serving host's speed belongs to that host (`embtrt tune` measures it there, knob
`front.run_overhead_tokens`). How the default was chosen: docs/bench.md ("Chunking").
"""

from __future__ import annotations

import copy
import math

from ..errors import SpecError
from .manifest import Manifest

# The front doors' own fallback, so a config without the parameter plans as a built one.
from embtrt_backend.routing import RUN_OVERHEAD_TOKENS  # noqa: E402,F401 (one value, re-exported for the builder)
from embtrt_backend.torch_graphs import format_graph_shapes, graph_batch_sizes  # noqa: E402


def bucket_batch(budget: int, bucket: int, cap: int) -> int:
    """Max rows per run of one bucket under the budget, capped by max_batch_size."""
    return max(1, min(cap, budget // bucket))


def bucket_models(name: str, bucket: int) -> tuple[str, ...]:
    """The models of one bucket whose batch the budget sets (those the repository has)."""
    return (f"{name}_{bucket}", f"{name}_{bucket}_tokenizer", f"{name}_{bucket}_encoder", f"{name}_{bucket}_pooler")


def budget_models(manifest: Manifest, have: set[str] | None = None) -> list[str]:
    """Every model whose config the budget touches: the front door, then each bucket's models."""
    out = [manifest.name] + [m for b in manifest.buckets for m in bucket_models(manifest.name, b)]
    return [m for m in out if have is None or m in have]


def load_order(manifest: Manifest, models) -> list[str]:
    """An order to reload models in: each bucket's ensemble after the models it composes, the front
    door last (it chunks by the encoders' max batch)."""
    name = manifest.name
    ensembles = {f"{name}_{b}" for b in manifest.buckets}
    return sorted(models, key=lambda m: (m == name, m in ensembles, m))


def budget_values(manifest: Manifest, most: int = 4) -> tuple[int, ...]:
    """Token budgets worth trying: the built one first, then those nearest it (by ratio) that give
    different max batches: powers of two from the shortest bucket to the longest bucket's full
    batch."""
    built = manifest.max_batch_tokens or 16384
    lo = max(1, min(manifest.buckets)).bit_length() - 1
    hi = (max(manifest.buckets) * manifest.max_batch_size).bit_length()
    seen: dict[tuple[int, ...], int] = {}
    candidates = [built] + sorted({1 << k for k in range(lo, hi + 1)}, key=lambda v: (abs(math.log2(v / built)), v))
    for v in candidates:
        key = tuple(bucket_batch(v, b, manifest.max_batch_size) for b in manifest.buckets)
        seen.setdefault(key, v)
    return tuple(seen.values())[:most]


def check_budget_change(manifest: Manifest, budget: int) -> None:
    if not 1 <= int(budget) <= 1 << 24:
        raise SpecError(f"invalid max_batch_tokens: {budget}", "1 .. 16777216 (rows x bucket length per run)")
    if manifest.target == "tensorrt":
        raise SpecError(f"{manifest.name} is a TensorRT repository: its engines fix the batch range of each bucket",
                        f"rebuild with `embtrt build --max-batch-tokens {budget}` to change the token budget")


def with_budget(manifest: Manifest, configs: dict[str, dict], budget: int) -> dict[str, dict]:
    """The model configs (Triton JSON, by model name; those present) with the token budget set."""
    check_budget_change(manifest, budget)
    out = copy.deepcopy(configs)
    cap, name = manifest.max_batch_size, manifest.name
    preferred = [int(p) for p in (manifest.spec.get("preferred_batch_sizes") or [])]
    for b in manifest.buckets:
        mb = bucket_batch(budget, b, cap)
        for model in bucket_models(name, b):
            cfg = out.get(model)
            if cfg is None:
                continue
            cfg["max_batch_size"] = mb
            _set_graph_shapes(cfg, {b: graph_batch_sizes(mb)})
            db = cfg.get("dynamic_batching")
            if db is not None and "preferred_batch_size" in db:
                db["preferred_batch_size"] = [p for p in preferred if p <= mb] or [mb]
            warm = cfg.get("model_warmup") or []
            if warm:
                kept, seen = [], set()
                for w in warm:  # batch 1 and the max batch, as the build writes them
                    w = dict(w, batch_size=1 if int(w.get("batch_size", 1)) <= 1 else mb)
                    key = (w["batch_size"], w.get("name"))
                    if key not in seen:
                        seen.add(key)
                        kept.append(w)
                cfg["model_warmup"] = kept
    front = out.get(name)
    if front is not None:
        params = front.setdefault("parameters", {})
        params["encoder_max_batch_sizes"] = {"string_value": ",".join(str(bucket_batch(budget, b, cap))
                                                                      for b in manifest.buckets)}
        params["max_batch_tokens"] = {"string_value": str(int(budget))}
        _set_graph_shapes(front, {b: graph_batch_sizes(bucket_batch(budget, b, cap)) for b in manifest.buckets})
    return out


def _set_graph_shapes(cfg: dict, shapes: dict[int, tuple[int, ...]]) -> None:
    """python-torch on CUDA captures a graph per bucket and batch size up to the bucket's max batch:
    where a config lists them (`graph_shapes`), they follow the budget's max batches."""
    params = cfg.get("parameters") or {}
    if "graph_shapes" in params:
        params["graph_shapes"] = {"string_value": format_graph_shapes(shapes)}


def expected_graph_shapes(manifest: Manifest, model: str, budget: int) -> str:
    """The graph_shapes a python-torch CUDA model of this repository has under the budget: every
    bucket for the front door, its own bucket for a bucket's model."""
    cap, name = manifest.max_batch_size, manifest.name
    buckets = manifest.buckets if model == name else [b for b in manifest.buckets if model in bucket_models(name, b)]
    return format_graph_shapes({b: graph_batch_sizes(bucket_batch(budget, b, cap)) for b in buckets})


def manifest_with_budget(manifest: Manifest, budget: int) -> Manifest:
    """embtrt.json's record of the budget (max_batch_tokens, bucket_max_batch) after `with_budget`."""
    import dataclasses

    cap = manifest.max_batch_size
    extra = dict(manifest.extra)
    if "spec" in extra:  # the build options as recorded: the rebuild command keeps the budget in force
        extra["spec"] = {**extra["spec"], "max_batch_tokens": int(budget)}
    return dataclasses.replace(manifest, max_batch_tokens=int(budget), extra=extra,
                               bucket_max_batch={b: bucket_batch(budget, b, cap) for b in manifest.buckets})
