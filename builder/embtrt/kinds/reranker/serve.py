"""RerankClient: a query and its documents -> scores and ranks over tritonclient gRPC.

One row per (query, document) pair goes to the reranker's front door (docs/rerankers.md); the
documents of one call are sent in requests of at most the front door's max batch size. Scores
equal CrossEncoder.predict, ranks CrossEncoder.rank (highest score first, ties in input order).
"""

from __future__ import annotations

import numpy as np
from embtrt_backend.kinds import RERANKER

from ...errors import ClientError
from ...serve.client import KindClient
from ...serve.wire import pair_params, text_input

ACTIVATIONS = ("default", "raw", "softmax")


def rank_order(scores: np.ndarray, top_n: int | None = None) -> list[int]:
    """Indices by score, highest first; equal scores keep their input order (as CrossEncoder.rank's
    stable sort); top_n None or over the count: every document."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return [int(i) for i in (order if top_n is None else order[:top_n])]


class RerankClient(KindClient):
    KIND = RERANKER.name

    # the model's default name: its kind's, as docs/rerankers.md builds it
    def __init__(self, url: str = "127.0.0.1:8001", model: str = RERANKER.name, **options) -> None:
        super().__init__(url, model, **options)

    def _infer(self, query: str, docs: list[str], params: dict) -> tuple[np.ndarray, np.ndarray]:
        def call():
            r = self._c.infer(self.model, [text_input([query] * len(docs), "QUERY"), text_input(docs, "DOCUMENT")],
                              client_timeout=self.timeout_s, parameters=params or None)
            return r.as_numpy("SCORES"), r.as_numpy("TOKENS").reshape(-1)

        return self._retrying(call)

    def score(self, query: str, documents: list[str], *, activation: str = "default", truncate: bool = True,
              truncation_direction: str = "right", prompt_name: str | None = None,
              instruction: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores [documents, labels], tokens per pair) in document order: CrossEncoder.predict of
        the pairs (activation raw: the logits; softmax: over the labels; prompt_name: one of the
        model's prompts, prepended to the query; none: the model's default prompt; instruction: an
        LLM-style reranker's, put in its prompt template; none: the template's default)."""
        if isinstance(documents, str):
            raise ClientError("score() takes a list of documents, got a single str", "wrap it: [document]")
        if not documents:
            raise ClientError("no documents to score", "pass at least one document")
        params = pair_params(activation, truncate, truncation_direction, prompt_name, allowed=ACTIVATIONS,
                             instruction=instruction)
        bs = self.batch_size
        parts = [self._infer(query, list(documents[i:i + bs]), params) for i in range(0, len(documents), bs)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def rerank(self, query: str, documents: list[str], top_n: int | None = None, **options) -> list[dict]:
        """[{index, score}] highest first, as CrossEncoder.rank (top_k = top_n): the documents'
        indices in the given list. A model of several labels is a classifier: use score()."""
        scores, _ = self.score(query, documents, **options)
        if scores.shape[1] != 1:
            raise ClientError(f"model {self.model!r} has {scores.shape[1]} labels: a classifier, not a ranker",
                              "use score() for its per-label scores")
        if top_n is not None and top_n < 1:
            raise ClientError(f"top_n {top_n}: must be at least 1")
        s = scores[:, 0]
        return [{"index": i, "score": float(s[i])} for i in rank_order(s, top_n)]
