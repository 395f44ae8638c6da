"""`embtrt verify` on a text-and-image embedder (docs/images.md): its gate (reference_gate) on a served
deployment, every corpus text and the gate's seeded images embedded over gRPC against
SentenceTransformer.encode (images as data URIs); --under-load resends every text in mixed-size requests at a
concurrency, each vector equal to its unloaded value, beside a background of image requests; --against
gates one deployment against another (texts and images). `embtrt tune`'s trial: one text per request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from embtrt_backend.kinds import MULTIMODAL

from ...measure.driver import Load
from ...measure.kind_measure import KindMeasure, KindReport, text_trial
from ...reference.verdict import Verdict
from .reference import gate_images
from .reference_gate import cosines, cross_tower, judge, limits_for

UNDER_LOAD = 1e-4   # max |difference| of a text's vector under load, fp32 and reduced alike (the same graph)


class MultimodalMeasure(KindMeasure):
    kind, value = MULTIMODAL, "vector"
    beside = ", beside image requests"

    def read(self) -> None:
        from .serve import ImageEmbeddingClient

        with ImageEmbeddingClient(self.url, self.model) as c:
            p = c.parameters()
        self.buckets = tuple(int(b) for b in p["embtrt.buckets"].split(","))
        self.precision = p.get("precision", "fp32")
        self.images = [f for f, _ in gate_images()]

    def served(self, texts: list[str], url: str, model: str) -> dict:
        from .serve import ImageEmbeddingClient

        with ImageEmbeddingClient(url, model) as c:
            vecs, tokens = c.with_tokens("TEXT", texts)
            out = {"text": vecs, "tokens": tokens, "image": c.embed_images(self.images)}
        if (url, model) == (self.url, self.model):   # the unloaded image vectors the background is held to
            self.unloaded_images, self.background_worst = out["image"], 0.0
        return out

    def described(self, texts: list[str]) -> str:
        return f"{len(texts)} real texts and {len(self.images)} seeded images embedded"

    def limit(self) -> tuple[float, str]:
        return UNDER_LOAD, ""

    def against(self, rep: KindReport, got, other, where: tuple[str, str]) -> float:
        """Both towers and retrieval both ways against the other deployment, by the gate's bounds at the lower
        of the two precisions."""
        from .serve import ImageEmbeddingClient

        precision = self.precision
        if precision == "fp32":
            with ImageEmbeddingClient(*where) as c:
                precision = c.parameters().get("precision", "fp32")
        lim = limits_for(precision)
        text = 1.0 - float(cosines(got["text"], other["text"]).min(initial=1.0))
        image = 1.0 - float(cosines(got["image"], other["image"]).min(initial=1.0))
        rep.check(text <= 1.0 - lim.text and image <= 1.0 - lim.image,
                  f"against {where[1]} at {where[0]} ({precision}): 1 - cosine min, texts {text:.1e} (limit "
                  f"{1.0 - lim.text:.0e}), images {image:.1e} (limit {1.0 - lim.image:.0e})",
                  f"against {where[0]}: vectors differ (1 - cosine: texts {text:.2e}, images {image:.2e})")
        cross_tower(rep, got["text"], got["image"], other["text"], other["image"], precision, f" against {where[1]}")
        return max(text, image)

    def gate(self, reference: Path, texts: list[str], got, trust_remote_code: bool) -> Verdict:
        from .reference import data_uri, encode_images, encode_texts, load_reference

        ref = load_reference(reference, trust_remote_code)
        want_image = encode_images(ref, [data_uri(f, fmt) for f, fmt in gate_images()])
        return judge(encode_texts(ref, texts), got["text"], got["tokens"], self.buckets, want_image, got["image"],
                     self.precision)

    def groups(self, texts: list[str]) -> list[int]:
        return [len(texts)]

    def unloaded(self, got) -> np.ndarray:
        return np.asarray(got["text"], np.float32)

    def error(self, got: np.ndarray, base: np.ndarray) -> float:
        """The texts' largest difference, or the background images' where larger (a failed image call: inf)."""
        return max(float(np.abs(got - base).max(initial=0.0)), getattr(self, "background_worst", 0.0))

    async def call(self, client, texts: list[str], group: int, first: int, count: int) -> np.ndarray:
        from ...serve.wire import outputs, text_input

        r = await client.infer(self.model, [text_input(texts[first:first + count])], outputs=outputs("EMBEDDING"),
                               client_timeout=120)
        return r.as_numpy("EMBEDDING")

    def background(self, client, texts: list[str], concurrency: int) -> list[Load]:
        """Image requests of 1 to 4 images beside the texts (batched with them and each other by the server),
        each vector held to its unloaded value: the largest difference joins the texts' (`error`)."""
        from ...serve.wire import outputs, text_input

        async def one(i: int) -> None:
            k = 1 + i % 4
            picks = [(i + j) % len(self.images) for j in range(k)]
            try:
                r = await client.infer(self.model, [text_input([self.images[p] for p in picks], "IMAGE")],
                                       outputs=outputs("EMBEDDING"), client_timeout=120)
                diff = float(np.abs(r.as_numpy("EMBEDDING") - self.unloaded_images[picks]).max())
            except Exception:
                diff = float("inf")
                raise
            finally:
                self.background_worst = max(self.background_worst, diff)

        return [Load(one, 2 * len(self.images), max(1, concurrency // 4))]

    def trial(self, texts: list[str], conc: int, requests: int, warmup: int) -> Load:
        """One real text per request."""
        return text_trial(self.url, self.model, texts, conc, requests, warmup)


verify_multimodal = MultimodalMeasure.verify
