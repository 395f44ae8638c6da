"""A real inference probe: health endpoints stay 200 when a Python stub is dead, so ask
every model for a vector instead (front door and every per-bucket ensemble)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from embtrt_backend.kinds import BY_NAME, kind_of

from .wire import text_input

# short enough for the smallest bucket of any tokenizer (it is sent to every NAME_<L> ensemble)
PROBE_TEXT = "embtrt liveness probe"


@dataclass
class ProbeResult:
    ok: bool
    latency_ms: float
    errors: dict[str, str] = field(default_factory=dict)
    checked: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.ok:
            return f"ok: {len(self.checked)} models answered in {self.latency_ms:.1f} ms"
        return "failed: " + "; ".join(f"{m}: {e}" for m, e in self.errors.items())


def probe(url: str, model: str, timeout_s: float = 10.0, also: tuple[str, ...] = (), expand: bool = True) -> ProbeResult:
    """Embed PROBE_TEXT through `model` and each `model_<L>` (expand), and each of `also`; all must
    agree with the first (cos >= 0.999). A length pool probes its own NAME_<L> ensembles with
    expand=False. A reranker's front door scores one (query, document) pair (finite SCORES), a
    sparse encoder's encodes one text (finite SPARSE_VALUES): that model alone."""
    import tritonclient.grpc as grpcclient

    t0 = time.perf_counter()
    errors: dict[str, str] = {}
    checked: list[str] = []
    c = grpcclient.InferenceServerClient(url)
    try:
        try:
            cfg = c.get_model_config(model, as_json=True, client_timeout=timeout_s)["config"]
            buckets = [b for b in cfg.get("parameters", {}).get("embtrt.buckets", {}).get("string_value", "").split(",") if b]
        except Exception as exc:  # server down or model unknown: the probe fails with the reason
            return ProbeResult(False, (time.perf_counter() - t0) * 1e3, {model: str(exc)}, [])
        kind = BY_NAME.get(cfg.get("parameters", {}).get("embtrt.kind", {}).get("string_value")) or kind_of(None)
        names = [model] + [f"{model}_{b}" for b in buckets if expand] + list(also) if kind.length_pools else [model]
        vecs: dict[str, np.ndarray] = {}
        for name in names:
            try:
                r = c.infer(name, [text_input([PROBE_TEXT], n) for n in kind.inputs], client_timeout=timeout_s)
                v = r.as_numpy(kind.probe_output)
                if v is None or not np.all(np.isfinite(v)):
                    raise ValueError(f"no finite {kind.probe_output} in the response")
                vecs[name] = v[0]
                if kind.image_input:   # the image path too (decode, preprocess, the image tower): an 8 x 8 PNG alone
                    from embtrt_backend.images import PROBE_PNG

                    vi = c.infer(name, [text_input([PROBE_PNG], kind.image_input)],
                                 client_timeout=timeout_s).as_numpy(kind.probe_output)
                    if vi is None or not np.all(np.isfinite(vi)):
                        raise ValueError(f"no finite {kind.probe_output} for the probe image")
            except Exception as exc:  # each model's failure is recorded by name
                errors[name] = str(exc)
            checked.append(name)
        if model in vecs and kind.length_pools:   # the bucket models' vectors equal the front door's
            base = vecs[model]
            for name, v in vecs.items():
                cos = float(np.dot(base, v) / max(np.linalg.norm(base) * np.linalg.norm(v), 1e-30))
                if cos < 0.999:
                    errors[name] = f"vector differs from the front door's (cosine {cos:.6f})"
    finally:
        c.close()
    return ProbeResult(not errors, (time.perf_counter() - t0) * 1e3, errors, checked)


def model_family(name: str) -> str:
    """NAME for NAME and its bucket ensembles NAME_<L>: the models whose vectors must agree."""
    import re

    return re.sub(r"_\d+$", "", name)


def probe_models(url: str, models: list[str], timeout_s: float = 10.0, expand: bool = True) -> ProbeResult:
    """Probe several models: each family (a model and its NAME_<L> ensembles) must agree within
    itself; different models (several repositories on one server) are probed separately."""
    families: dict[str, list[str]] = {}
    for m in models:
        families.setdefault(model_family(m), []).append(m)
    results = [probe(url, ms[0], timeout_s, also=tuple(ms[1:]), expand=expand) for ms in families.values()]
    return ProbeResult(all(r.ok for r in results), sum(r.latency_ms for r in results),
                       {k: v for r in results for k, v in r.errors.items()}, [m for r in results for m in r.checked])
