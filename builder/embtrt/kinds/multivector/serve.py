"""MultiVectorClient: texts -> token vectors (and a bge-m3 model's dense vectors and lexical weights)
over tritonclient gRPC (docs/multivector.md).

`encode_query` / `encode_document` return each text's [count, dim] float32 vectors, equal to
MultiVectorEncoder's; `encode` returns bge-m3's outputs with FlagEmbedding's names (dense_vecs,
lexical_weights as {token id: weight}, colbert_vecs); `similarity` is MaxSim on the client's side, as
MultiVectorEncoder.similarity computes it.
"""

from __future__ import annotations

import numpy as np
from embtrt_backend.kinds import MULTIVECTOR
from embtrt_backend.kinds.multivector.core import unpadded
from embtrt_backend.kinds.multivector.score import maxsim_matrix

from ...errors import ClientError
from ...serve.client import KindClient
from ...serve.wire import text_input


class MultiVectorClient(KindClient):
    KIND = MULTIVECTOR.name

    def __init__(self, url: str = "127.0.0.1:8001", model: str = "colbert", **options) -> None:
        super().__init__(url, model, **options)

    @property
    def layout(self) -> str:
        return self.parameters()["mv_layout"]

    def _infer(self, texts: list[str], params: dict, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        import tritonclient.grpc as grpcclient

        def call():
            r = self._c.infer(self.model, [text_input(texts)], client_timeout=self.timeout_s, parameters=params or None,
                              outputs=[grpcclient.InferRequestedOutput(n) for n in outputs])
            return {n: r.as_numpy(n) for n in outputs}

        return self._retrying(call)

    def _batches(self, texts: list[str], params: dict, outputs: tuple[str, ...]):
        if isinstance(texts, str):
            raise ClientError("this method takes a list of texts, got a single str", "wrap it: [text]")
        bs = self.batch_size
        for i in range(0, len(texts), bs):
            yield self._infer(list(texts[i:i + bs]), params, outputs)

    def token_vectors(self, texts: list[str], *, input_type: str = "document", prompt_name: str | None = None,
                      truncate: str | None = None) -> list[np.ndarray]:
        """Each text's [count, dim] float32 token vectors: input_type query is encode_query, document
        encode_document (bge-m3: its ColBERT vectors, the same for both)."""
        params = {k: v for k, v in {"input_type": input_type, "prompt_name": prompt_name, "truncate": truncate}.items()
                  if v is not None}
        out: list[np.ndarray] = []
        for r in self._batches(texts, params, ("TOKEN_EMBEDDINGS", "TOKEN_COUNTS")):
            out += [v.copy() for v in unpadded(r["TOKEN_EMBEDDINGS"], r["TOKEN_COUNTS"])]
        return out

    def encode_query(self, texts: list[str], **options) -> list[np.ndarray]:
        return self.token_vectors(texts, input_type="query", **options)

    def encode_document(self, texts: list[str], **options) -> list[np.ndarray]:
        return self.token_vectors(texts, input_type="document", **options)

    def encode(self, texts: list[str], *, return_dense: bool = True, return_sparse: bool = False,
               return_colbert_vecs: bool = False, truncate: str | None = None) -> dict:
        """A bge-m3 model's outputs, as BGEM3FlagModel.encode names them, from one pass per batch:
        dense_vecs [texts, hidden], lexical_weights [{token id (str): weight}], colbert_vecs [[count, dim]]."""
        if self.layout != "m3":
            raise ClientError(f"model {self.model!r} is a ColBERT model: it has token vectors only",
                              "use encode_query / encode_document")
        wanted = (("DENSE",) if return_dense else ()) + (("SPARSE_INDICES", "SPARSE_VALUES") if return_sparse else ()) \
            + (("TOKEN_EMBEDDINGS", "TOKEN_COUNTS") if return_colbert_vecs else ())
        if not wanted:
            raise ClientError("encode() asked for no output", "set return_dense, return_sparse or return_colbert_vecs")
        dense, lexical, colbert = [], [], []
        for r in self._batches(texts, {"truncate": truncate} if truncate else {}, wanted):
            if return_dense:
                dense.append(r["DENSE"])
            if return_sparse:
                for ix, v in zip(r["SPARSE_INDICES"], r["SPARSE_VALUES"]):
                    keep = ix >= 0
                    lexical.append({str(int(i)): float(w) for i, w in zip(ix[keep], v[keep])})
            if return_colbert_vecs:
                colbert += [v.copy() for v in unpadded(r["TOKEN_EMBEDDINGS"], r["TOKEN_COUNTS"])]
        out: dict = {"dense_vecs": np.concatenate(dense) if return_dense else None,
                     "lexical_weights": lexical if return_sparse else None,
                     "colbert_vecs": colbert if return_colbert_vecs else None}
        return out

    def similarity(self, queries: list[np.ndarray], documents: list[np.ndarray]) -> np.ndarray:
        """MaxSim [queries, documents] (meanmaxsim where the model says so), float32."""
        return maxsim_matrix(queries, documents, self.parameters().get("mv_similarity") == "meanmaxsim")
