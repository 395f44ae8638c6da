"""ImageEmbeddingClient: texts and images -> vectors over tritonclient gRPC (docs/images.md).

`embed(texts)` equals `SentenceTransformer.encode(texts)`; `embed_images(images)` equals encode of the same
images given as data URIs or paths (decoded with their EXIF orientation, as transformers' load_image does).
An image is an encoded file: bytes, a path, or a data URI string (never an http(s) URL: the client fetches
nothing, and neither does the server). Texts and images go in separate requests (one modality each), in
batches of at most the model's max batch."""

from __future__ import annotations

import os

import numpy as np
from embtrt_backend.kinds import MULTIMODAL

from ...errors import ClientError
from ...serve.client import KindClient, request_options
from ...serve.image_files import image_bytes
from ...serve.wire import output_name, outputs, text_input


class ImageEmbeddingClient(KindClient):
    KIND = MULTIMODAL.name

    def __init__(self, url: str = "127.0.0.1:8001", model: str = "clip", **options) -> None:
        super().__init__(url, model, **options)

    @property
    def dim(self) -> int:
        return int(self.parameters()["embtrt.dim"])

    def _run(self, name: str, rows: list, params: dict) -> np.ndarray:
        return self.with_tokens(name, rows, params)[0]

    def with_tokens(self, name: str, rows: list, params: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the input `name` (TEXT or IMAGE) -> (their vectors, each row's tokens), in calls of at most
        the model's max batch."""
        params = params or {}
        out = output_name(params)
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32), np.zeros(0, np.int64)
        bs = self.batch_size

        def call(inp):
            r = self._retrying(lambda: self._c.infer(self.model, [inp], client_timeout=self.timeout_s,
                                                     outputs=outputs(out, "TOKENS"), parameters=params or None))
            return r.as_numpy(out), r.as_numpy("TOKENS").reshape(-1)

        done = [call(text_input(rows[i:i + bs], name)) for i in range(0, len(rows), bs)]
        return np.concatenate([d[0] for d in done]), np.concatenate([d[1] for d in done])

    def embed(self, texts: list[str], *, prompt_name: str | None = None, dimensions: int | None = None,
              truncate: str | None = None, embedding_type: str | None = None) -> np.ndarray:
        """Texts' vectors in input order (SentenceTransformer.encode's)."""
        if isinstance(texts, str):
            raise ClientError("embed() takes a list of texts, got a single str", "wrap it: embed([text])")
        return self._run("TEXT", list(texts), request_options(prompt_name, None, dimensions, truncate, embedding_type))

    def embed_images(self, images: list, *, dimensions: int | None = None, embedding_type: str | None = None) -> np.ndarray:
        """Images' vectors in input order: each an encoded file's bytes, a path or a data URI."""
        if isinstance(images, (bytes, str, os.PathLike)):
            raise ClientError("embed_images() takes a list of images", "wrap it: embed_images([image])")
        files = [image_bytes(x, i) for i, x in enumerate(images)]
        return self._run("IMAGE", files, request_options(None, None, dimensions, None, embedding_type))
