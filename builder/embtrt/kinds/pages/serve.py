"""PageImageClient: queries and page images -> token vectors over tritonclient gRPC (docs/visual-documents.md).

`encode_queries(texts)` returns each query's [count, dim] float32 vectors, equal to ColPaliForRetrieval's on
`processor.process_queries` (MultiVectorEncoder.encode_query); `encode_pages(images)` each page image's, equal to
the model's on `processor.process_images` (encode_document of the image); an image is an encoded file's bytes, a
path or a data URI (never an http(s) URL). `score` is MaxSim on the client's side, as
`processor.score_retrieval` computes it. Queries and images go in separate requests (one modality each), in
batches of at most the model's max batch."""

from __future__ import annotations

import os

import numpy as np
from embtrt_backend.kinds import PAGES
from embtrt_backend.token_vectors import maxsim_matrix, unpadded

from ...errors import ClientError
from ...serve.client import KindClient
from ...serve.image_files import image_bytes
from ...serve.wire import text_input


class PageImageClient(KindClient):
    KIND = PAGES.name

    def __init__(self, url: str = "127.0.0.1:8001", model: str = "colpali", **options) -> None:
        super().__init__(url, model, **options)

    def _vectors(self, name: str, rows: list) -> list[np.ndarray]:
        import tritonclient.grpc as grpcclient

        out: list[np.ndarray] = []
        bs = self.batch_size
        wanted = [grpcclient.InferRequestedOutput(n) for n in ("TOKEN_EMBEDDINGS", "TOKEN_COUNTS")]
        for a in range(0, len(rows), bs):
            inp = text_input(rows[a:a + bs], name)
            r = self._retrying(lambda inp=inp: self._c.infer(self.model, [inp], client_timeout=self.timeout_s,
                                                             outputs=wanted))
            out += [v.copy() for v in unpadded(r.as_numpy("TOKEN_EMBEDDINGS"), r.as_numpy("TOKEN_COUNTS"))]
        return out

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        """Each query's [count, dim] token vectors (its augmentation tokens' included), in input order."""
        if isinstance(texts, str):
            raise ClientError("encode_queries() takes a list of texts, got a single str", "wrap it: [text]")
        return self._vectors("TEXT", list(texts))

    def encode_pages(self, images: list) -> list[np.ndarray]:
        """Each page image's [count, dim] token vectors (its image tokens and its prompt's), in input order."""
        if isinstance(images, (bytes, str, os.PathLike)):
            raise ClientError("encode_pages() takes a list of images", "wrap it: encode_pages([image])")
        return self._vectors("IMAGE", [image_bytes(x, i) for i, x in enumerate(images)])

    @staticmethod
    def score(queries: list[np.ndarray], pages: list[np.ndarray]) -> np.ndarray:
        """MaxSim [queries, pages], float32 (score_retrieval's)."""
        return maxsim_matrix(queries, pages)
