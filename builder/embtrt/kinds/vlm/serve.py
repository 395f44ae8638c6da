"""VlmEmbeddingClient: texts, images, or texts fused with images -> vectors over tritonclient gRPC
(docs/visual-documents.md). `embed(texts)`, `embed_images(images)` and `embed_fused(texts, images)` (row k of each one
input) equal the model card's computation; `instruction` (the system message) per call. An image is an encoded
file's bytes, a path or a data URI (never an http(s) URL). Calls of at most the model's max batch."""

from __future__ import annotations

import os

import numpy as np
from embtrt_backend.kinds import VLM

from ...errors import ClientError
from ...serve.client import KindClient
from ...serve.image_files import image_bytes
from ...serve.wire import outputs, text_input


class VlmEmbeddingClient(KindClient):
    KIND = VLM.name

    def __init__(self, url: str = "127.0.0.1:8001", model: str = "vlm_embedder", **options) -> None:
        super().__init__(url, model, **options)

    def _embed(self, texts: list[str] | None, files: list[bytes] | None, instruction: str | None) -> np.ndarray:
        n = len(texts if texts is not None else files or [])
        params = {"instruction": instruction} if instruction is not None else None
        out = []
        for a in range(0, n, self.batch_size):
            inputs = ([text_input(texts[a:a + self.batch_size])] if texts is not None else []) + \
                ([text_input(files[a:a + self.batch_size], "IMAGE")] if files is not None else [])
            r = self._retrying(lambda inputs=inputs: self._c.infer(self.model, inputs, client_timeout=self.timeout_s,
                                                                   outputs=outputs("EMBEDDING"), parameters=params))
            out.append(r.as_numpy("EMBEDDING"))
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    @staticmethod
    def _refuse(options: dict) -> None:
        """Request options of the pooled kinds (`embtrt embed`'s) a VLM embedder does not take at its front door."""
        given = sorted(k for k, v in options.items() if v is not None)
        if given:
            raise ClientError(f"{', '.join(given)}: a VLM embedder's front door takes an instruction only",
                              "leave them out (the gateway applies dimensions and embedding types)")

    def embed(self, texts: list[str], *, instruction: str | None = None, **options) -> np.ndarray:
        self._refuse(options)
        if isinstance(texts, str):
            raise ClientError("embed() takes a list of texts, got a single str", "wrap it: embed([text])")
        return self._embed(list(texts), None, instruction)

    def embed_images(self, images: list, *, instruction: str | None = None, **options) -> np.ndarray:
        self._refuse(options)
        if isinstance(images, (bytes, str, os.PathLike)):
            raise ClientError("embed_images() takes a list of images", "wrap it: embed_images([image])")
        return self._embed(None, [image_bytes(x, i) for i, x in enumerate(images)], instruction)

    def embed_fused(self, texts: list[str], images: list, *, instruction: str | None = None) -> np.ndarray:
        """Each (text, image) pair fused in one input: one vector per pair."""
        if len(texts) != len(images):
            raise ClientError(f"embed_fused() pairs texts with images: {len(texts)} texts, {len(images)} images",
                              "give one image per text")
        return self._embed(list(texts), [image_bytes(x, i) for i, x in enumerate(images)], instruction)
