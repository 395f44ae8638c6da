"""`embtrt verify` on a VLM embedder: the gate (kinds.vlm.reference_gate, by the served precision) on a served
deployment, the corpus texts that fit, the gate's 16 seeded images and texts fused with them, over gRPC;
--under-load resends every text in mixed-size requests at a concurrency, each vector equal to its unloaded one;
--against compares two deployments by the same bounds. `embtrt tune`'s trial: one text per request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from embtrt_backend.kinds import VLM

from ...measure.driver import Load
from ...measure.kind_measure import KindMeasure, KindReport, text_trial
from ...reference.images import data_uri, gate_images
from ...reference.verdict import Verdict
from .reference_gate import GROUPS, judge

UNDER_LOAD = 1e-4
MARGIN = 64   # the chat template's tokens around a text: a text of at most max - MARGIN bytes fits


class VlmMeasure(KindMeasure):
    kind, value = VLM, "vector"

    def read(self) -> None:
        from .serve import VlmEmbeddingClient

        with VlmEmbeddingClient(self.url, self.model) as c:
            p = c.parameters()
            self.max_tokens, self.precision = int(p["max_seq_length"]), p.get("precision", "fp32")
        self.images = [f for f, _ in gate_images()]

    def texts(self, texts: list[str]) -> list[str]:
        if not hasattr(self, "max_tokens"):
            self.read()
        return [t for t in texts if len(t.encode("utf-8")) <= self.max_tokens - MARGIN]

    def served(self, texts: list[str], url: str, model: str) -> dict:
        from .serve import VlmEmbeddingClient

        t = self.texts(texts)
        with VlmEmbeddingClient(url, model) as c:
            return {"texts": c.embed(t), "images": c.embed_images(self.images),
                    "fused": c.embed_fused(t[:len(self.images)], self.images[:len(t)])}

    def described(self, texts: list[str]) -> str:
        return f"{len(self.texts(texts))} real texts, {len(self.images)} seeded images and texts fused with them embedded"

    def limit(self) -> tuple[float, str]:
        return UNDER_LOAD, ""

    def against(self, rep: KindReport, got, other, where: tuple[str, str]) -> float:
        """Two deployments by the gate's bounds of this deployment's precision (fp32: 0.99999 and top-10s equal up to
        ties; reduced: seed 003's); verify the reduced-precision deployment with --against the fp32 one."""
        v = judge(got, other, self.precision)
        for line in v.lines:
            rep.check(line.startswith("[ok]"), f"against {where[1]} at {where[0]}: {line.split('] ', 1)[-1]}",
                      f"against {where[0]}: {line.split('] ', 1)[-1]}")
        return max(1.0 - float(v.figures.get(f"{n}_cosine_min", 1.0)) for n in GROUPS)

    def gate(self, reference: Path, texts: list[str], got, trust_remote_code: bool) -> Verdict:
        from transformers.image_utils import load_image

        from .reference import embed, load_reference

        ref, t = load_reference(reference, trust_remote_code), self.texts(texts)
        pics = [load_image(data_uri(f, "png")) for f in self.images]
        want = {"texts": embed(ref, [(x, None) for x in t]), "images": embed(ref, [(None, p) for p in pics]),
                "fused": embed(ref, list(zip(t[:len(pics)], pics)))}
        return judge(got, want, self.precision)

    def groups(self, texts: list[str]) -> list[int]:
        return [len(self.texts(texts))]

    def unloaded(self, got) -> np.ndarray:
        return np.asarray(got["texts"], np.float32)

    def error(self, got: np.ndarray, base: np.ndarray) -> float:
        return float(np.abs(got - base).max(initial=0.0))

    async def call(self, client, texts: list[str], group: int, first: int, count: int) -> np.ndarray:
        from ...serve.wire import outputs, text_input

        r = await client.infer(self.model, [text_input(self.texts(texts)[first:first + count])],
                               outputs=outputs("EMBEDDING"), client_timeout=120)
        return r.as_numpy("EMBEDDING")

    def trial(self, texts: list[str], conc: int, requests: int, warmup: int) -> Load:
        """One real text per request."""
        return text_trial(self.url, self.model, self.texts(texts), conc, requests, warmup)
