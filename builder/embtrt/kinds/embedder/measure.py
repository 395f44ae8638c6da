"""`embtrt verify`: the served vectors against the reference, per length bucket, also under load.

Reference: sentence-transformers for sentence-transformers folders, else PyTorch fp32 with the
model's own pooling (never the served model's claim about itself, which is what is tested).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import numpy as np

from ...errors import ClientError
from ...reference.modelinfo import default_buckets, model_hash
from ...reference.parity import GateReport, bucket_label, cosine_rows, evaluate
from ...reference.torch_ref import Reference
from ...reference.verdict import Verdict
from ...repository.gate import Gate
from ...serve.wire import text_input
from ...measure.driver import Load, drive


@dataclass
class LoadReport:
    concurrency: int
    requests: int
    texts: int
    errors: int
    background_requests: int
    seconds: float
    cosine_min: float
    threshold: float
    lost_rows: int
    mismatched: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.errors == 0 and self.lost_rows == 0 and self.cosine_min >= self.threshold

    def line(self) -> str:
        return (f"under load: {self.texts} texts in {self.requests} mixed-length requests at concurrency "
                f"{self.concurrency} (+{self.background_requests} background requests) in {self.seconds:.1f} s; "
                f"errors {self.errors}; rows without a vector {self.lost_rows}; min cosine to the unloaded vector {self.cosine_min:.6f} "
                f"(>= {self.threshold})")


class VerifyReport(Verdict):
    """`embtrt verify` of an embedder, a Verdict: the cosine gate's, the under-load check's, the
    identities compared; its lines end with PASSED or FAILED and the failures."""

    def __init__(self, model: str, reference: str, gate: GateReport, identity: dict[str, str], warnings: list[str],
                 load: LoadReport | None = None) -> None:
        super().__init__()
        self.model, self.reference, self.gate, self.identity, self.warnings, self.load = (
            model, reference, gate, identity, warnings, load)
        self.lines.append(f"verify {model} against {reference}")
        self.add(gate)
        if load is not None:
            self.check(load.passed, load.line(), "under-load check")
            self.lines += [f"    cosine {m['cosine']:.6f}: {m['text']!r}" for m in load.mismatched[:5]]
        if not gate.passed:
            self.lines += ["worst texts:"] + [f"    [{w['bucket']}] cosine {w['cosine']:.6f}: {w['text']!r}"
                                              for w in gate.worst_texts]
        self.lines += [f"warning: {w}" for w in warnings]
        self.lines.append("PASSED" if self.passed else "FAILED: " + "; ".join(self.failures))

    def as_dict(self, lines: bool = False) -> dict:
        d = {"model": self.model, "reference": self.reference, "passed": self.passed, "identity": self.identity,
             "warnings": self.warnings, "gate": self.gate.as_dict()}
        if self.load is not None:
            d["under_load"] = {**self.load.__dict__, "passed": self.load.passed}
        if lines:
            d["lines"] = list(self.lines)
        return d


def identity_warnings(served: dict[str, str], ref: Reference, index_identity: dict[str, str] | None) -> list[str]:
    if not served:
        return ["the served model publishes no embtrt identity; index and query provenance cannot be checked"]
    out = []
    sha = served.get("embtrt.model_sha256")
    if sha and sha != model_hash(ref.path):
        out.append(f"the served model was built from different weights than {ref.path} "
                   f"(sha256 {sha[:12]}... vs {model_hash(ref.path)[:12]}...)")
    if served.get("embtrt.precision", "fp32") != "fp32":
        out.append(f"the served model runs {served['embtrt.precision']}; vectors indexed with an fp32 backend "
                   "would be compared with reduced-precision queries")
    if index_identity:
        for key in ("embtrt.model_sha256", "embtrt.pooling", "embtrt.normalize", "embtrt.precision",
                    "embtrt.backend_profile"):
            if key in index_identity and index_identity.get(key) != served.get(key):
                out.append(f"index and query differ in {key}: index {index_identity.get(key)!r}, "
                           f"served {served.get(key)!r}; re-embed the index or serve the same profile")
    return out


def require_bundled(url: str, model: str) -> None:
    """Before any work: the default reference (the bundled all-MiniLM-L6-v2) is the served model's, or a
    ClientError naming the identity the server reports (was: the MiniLM reference computed, then a shape
    refusal)."""
    import tritonclient.grpc as grpcclient

    from ...reference.modelinfo import default_model_path
    from ...serve.client import model_config, replicas

    u = replicas(url)[0]
    c = grpcclient.InferenceServerClient(u)
    try:
        params = model_config(c, model, u)[1]
    finally:
        c.close()
    sha, bundled = params.get("embtrt.model_sha256"), model_hash(default_model_path())
    if sha and sha != bundled:
        raise ClientError(f"{model} at {url} was built from other weights (embtrt.model {params.get('embtrt.model')}, "
                          f"sha256 {sha[:12]}..., dim {params.get('embtrt.dim')}) than the default reference, the "
                          f"bundled all-MiniLM-L6-v2 (sha256 {bundled[:12]}...)",
                          "pass --reference FOLDER: the model folder it was built from")


async def _under_load(url: str, model: str, texts: list[str], baseline: np.ndarray, concurrency: int,
                      threshold: float, seed: int = 0, max_request: int = 8) -> LoadReport:
    """Send every text again in shuffled mixed-length requests at `concurrency`, while background
    traffic (random corpus texts) runs; every vector must equal its unloaded value."""
    import tritonclient.grpc.aio as aioclient

    rng = random.Random(seed)
    order = list(range(len(texts)))
    rng.shuffle(order)
    requests: list[list[int]] = []
    i = 0
    while i < len(order):
        n = rng.randint(1, max_request)
        requests.append(order[i:i + n])
        i += n
    got = np.full_like(baseline, np.nan)
    client = aioclient.InferenceServerClient(url)

    async def call(k: int) -> None:
        res = await client.infer(model, [text_input([texts[j] for j in requests[k]])], client_timeout=120)
        got[requests[k]] = res.as_numpy("EMBEDDING")

    def noise() -> Load:  # background traffic only loads the server: its failures are not the report's
        r = random.Random(seed + 1)

        async def call(_: int) -> None:
            batch = [texts[r.randrange(len(texts))] for _ in range(r.randint(1, max_request))]
            await client.infer(model, [text_input(batch)], client_timeout=120)
        return Load(call)

    t0 = time.perf_counter()
    fg = Load(call, len(requests), concurrency)
    bg = [noise() for _ in range(max(1, concurrency // 8))]
    try:
        await drive(fg, bg)
    finally:
        await client.close()
    seconds = time.perf_counter() - t0
    errors, background = len(fg.failures), sum(b.done for b in bg)  # every error fails the report
    filled = ~np.isnan(got).any(axis=1)
    cos = np.full(len(texts), -1.0)
    if filled.any():
        cos[filled] = cosine_rows(baseline[filled], got[filled])
    bad = [{"index": int(k), "cosine": float(cos[k]), "text": texts[k][:100]} for k in np.argsort(cos)[:5]
           if cos[k] < threshold]
    return LoadReport(concurrency, len(requests), len(texts), errors, background, seconds, float(cos.min()),
                      threshold, int((~filled).sum()), bad)


def verify(url: str, model: str, reference: Reference, texts: list[str], gate: Gate, *,
           under_load: bool = False, concurrency: int = 64, load_cosine: float = 0.999,
           index_identity: dict[str, str] | None = None, prompt_name: str | None = None,
           dimensions: int | None = None, log=print) -> VerifyReport:
    """Served vectors (with the request options given) against SentenceTransformer.encode with the
    same options; under load, against their own unloaded values."""
    from ...serve.client import EmbeddingClient

    with EmbeddingClient(url, model) as c:
        meta = c.metadata()
        if meta.parameters.get("overflow") == "reject":  # such a build refuses over-long texts by design
            limit = int(meta.parameters.get("max_seq_length", reference.max_len))
            keep = [t for t, n in zip(texts, reference.token_counts(texts)) if n <= limit]
            if len(keep) < len(texts):
                log(f"{len(texts) - len(keep)} texts longer than {limit} tokens left out: {model} was built with "
                    "--overflow reject and refuses them (pass --corpus to choose the texts)")
            texts = keep
        said = ", ".join(f"{k} {v}" for k, v in (("prompt_name", prompt_name), ("dimensions", dimensions)) if v is not None)
        log(f"embedding {len(texts)} texts through {model} at {url}" + (f" ({said})" if said else ""))
        served = c.embed(texts, prompt_name=prompt_name, dimensions=dimensions)
    log(f"reference: {reference.describe()}" + (f" ({said})" if said else ""))
    ref = reference.embed(texts, prompt_name=prompt_name, dimensions=dimensions)
    if ref.shape != served.shape:
        raise ClientError(f"{model} returns vectors of shape {served.shape}, the reference {ref.shape}",
                          "is --reference the model this repository was built from?")
    buckets = tuple(int(b) for b in meta.parameters.get("embtrt.buckets", "").split(",") if b) \
        or default_buckets(reference.max_len)
    max_len = int(meta.parameters.get("embtrt.max_seq_length", reference.max_len))
    labels = [bucket_label(int(n), buckets, max_len) for n in reference.token_counts(texts)]
    gate_report = evaluate(ref, served, labels, gate, texts)
    load = None
    if under_load:
        log(f"under load: concurrency {concurrency}")
        if said:
            raise ClientError("--under-load compares default requests with their unloaded values: run it without "
                              "--prompt-name / --dimensions")
        load = asyncio.run(_under_load(url, model, texts, served, concurrency, load_cosine))
    return VerifyReport(model, reference.describe(), gate_report, meta.identity,
                        identity_warnings(meta.identity, reference, index_identity), load)


IDENTITY_KEYS = ("embtrt.model", "embtrt.model_sha256", "embtrt.pooling", "embtrt.normalize", "embtrt.dim",
                 "embtrt.max_seq_length", "embtrt.precision", "embtrt.target", "embtrt.backend_profile")


def identity_diff(a: dict[str, str], b: dict[str, str], name_a: str, name_b: str) -> list[str]:
    """What differs between two deployments' identities, and what it means for an index."""
    out = []
    diff = [k for k in IDENTITY_KEYS if a.get(k) != b.get(k)]
    for k in diff:
        out.append(f"{k}: {name_a} {a.get(k)!r}, {name_b} {b.get(k)!r}")
    model_keys = {"embtrt.model_sha256", "embtrt.pooling", "embtrt.normalize", "embtrt.dim", "embtrt.max_seq_length"}
    if model_keys & set(diff):
        out.append(f"different models: vectors of {name_a} and {name_b} must not share an index; re-embed the index "
                   f"with the deployment that serves the queries")
    elif set(diff) & {"embtrt.precision", "embtrt.target", "embtrt.backend_profile"}:
        out.append("same model on different backends or precisions: the agreement gate above decides whether their "
                   "vectors may share an index; where it fails, re-embed the index with the query-serving deployment")
    elif diff:
        out.append("the same model, backend and precision under other names: the agreement gate above confirms "
                   "that their vectors may share an index")
    return out


def verify_against(url: str, model: str, other_url: str, other_model: str, texts: list[str], gate: Gate,
                   token_counts: np.ndarray, log=print) -> VerifyReport:
    """The cross-deployment release gate: embed the corpus through two deployments and gate their
    agreement per length bucket (cosine p50 / p01, top-10 overlap, recall@10 of one against the
    other), with the second deployment as the reference; their identities are compared too."""
    from ...serve.client import EmbeddingClient

    ids, got = [], []
    for u, m in ((url, model), (other_url, other_model)):
        with EmbeddingClient(u, m) as c:
            ids.append(c.metadata().identity)
            log(f"embedding {len(texts)} texts through {m} at {u}")
            got.append(c.embed(texts))
    (ida, idb), (vec_a, vec_b) = ids, got
    name_a, name_b = f"{model}@{url}", f"{other_model}@{other_url}"
    notes = identity_diff(ida, idb, name_a, name_b)
    if vec_a.shape != vec_b.shape:
        raise ClientError(f"{name_a} returns {vec_a.shape[1]}-dimensional vectors, {name_b} "
                          f"{vec_b.shape[1]}-dimensional: different models, whose vectors cannot be compared",
                          "; ".join(notes) or "re-embed the index with the deployment that serves the queries")
    buckets = tuple(int(b) for b in idb.get("embtrt.buckets", "").split(",") if b) or (32, 128, 512)
    max_len = int(idb.get("embtrt.max_seq_length", buckets[-1]))
    labels = [bucket_label(int(n), buckets, max_len) for n in token_counts]
    return VerifyReport(name_a, name_b, evaluate(vec_b, vec_a, labels, gate, texts), ida, notes)
