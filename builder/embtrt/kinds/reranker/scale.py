"""The reranking of one reranker model behind the gateway (`Reranker`): a request's pairs (its query
with each document) to the model's front door, which tokenizes, truncates, plans, scores and applies
the activation itself (docs/rerankers.md), in parts of at most its max batch sent concurrently; the
scores back in document order, and the tokens the front door reports (TOKENS) as the usage.

Every API shape (scale_schema) comes here as one `RerankRequest`: one semantics behind the routes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from embtrt_backend.kinds import RERANKER
from embtrt_backend.kinds.reranker.pairs import DEFAULT

from ...serve import wire
from ...scale.gateway.errors import ApiError
from ...scale.gateway.front_door import FrontDoorModel
from .scale_schema import DOC_FIELDS, RerankModel, RerankRequest
from ...scale.gateway.served import ServedReranker


class Reranker(FrontDoorModel):
    """The gateway of one reranker (repository): a request's pairs, scored by its front door."""

    kind, does, value = RERANKER, "scores every pair", "score"
    outputs, probe = ("SCORES", "TOKENS"), ("embtrt readiness probe", ["a document"])
    served_as = ServedReranker

    @property
    def schema(self) -> RerankModel:
        return RerankModel(self.served.num_labels, self.served.max_text_bytes)

    async def rerank(self, req: RerankRequest) -> tuple[np.ndarray, int]:
        """-> (each document's score, in document order; the tokens scored, as the front door counts them)."""
        q, docs = req.query, req.documents
        self.admission.check_count(len(q) * len(docs) + sum(map(len, docs)), "documents")  # each pair: the query too
        await check_row_tokens(self, [(q, d) for d in docs], "documents")
        params = {"activation": req.activation, "truncate": req.truncate,
                  "truncation_direction": req.truncation_direction}
        parts, tokens = await self.send(docs, q, params, DOC_FIELDS[req.api])
        return (parts[0] if len(parts) == 1 else np.concatenate(parts))[:, 0], tokens

    async def classify(self, req) -> tuple[np.ndarray, int]:
        """TEI's /predict (and Hugging Face's task shape) on a reranker, as TEI serves it: each (text,
        text_pair) row's scores [rows, labels], in order; a reranker scores pairs, so a single text is refused."""
        pairs = req.pairs
        if pairs is None or any(p is None for p in pairs):
            raise ApiError(400, f"{self.served.name} is {self.kind.label}: it scores text pairs, so send each input as "
                           "[query, document]", param=req.field)
        return await self.score_pairs(list(zip(req.texts, pairs)), req.activation, req.field, req.truncate,
                                      req.truncation_direction)

    async def score_pairs(self, pairs: list[tuple[str, str]], activation: str, field: str, truncate: bool = True,
                          truncation_direction: str = "right") -> tuple[np.ndarray, int]:
        """Pairs of any queries -> (each pair's scores [pairs, labels] (the model's activation, or raw /
        softmax / sigmoid), in order; the tokens): the request's caps checked once, the pairs sent as rows
        (a refused one named `field[k]` by its index in the request)."""
        self.admission.check_count(sum(len(q) + len(d) for q, d in pairs), field)
        await check_row_tokens(self, pairs, field)
        params = {"activation": activation, "truncate": truncate, "truncation_direction": truncation_direction}
        parts, tokens = await self.send(pairs, None, params, field)
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)), tokens

    def inputs(self, docs: list, query: str | None) -> list:
        """One query against documents; or (query None) (query, document) pairs."""
        if query is None:
            return [wire.text_input([q for q, _ in docs], "QUERY"), wire.text_input([d for _, d in docs], "DOCUMENT")]
        return [wire.text_input([query] * len(docs), "QUERY"), wire.text_input(docs, "DOCUMENT")]

    def unpack(self, docs: list[str], outs: tuple) -> np.ndarray:
        (scores,), s = outs, self.served
        if scores.ndim != 2 or scores.shape != (len(docs), s.num_labels):
            raise ApiError(502, f"{s.name}'s front door answered SCORES of shape {list(scores.shape)} for "
                           f"{len(docs)} pairs; expected [{len(docs)}, {s.num_labels}]", type_="server_error")
        return scores

    def tei_type(self) -> dict:
        """TEI's /info model_type: a reranker, its labels by index (transformers' default names)."""
        return tei_labels(self.kind, self.served.labels)

    def facts(self) -> dict:
        s = self.served
        return {"num_labels": s.num_labels, "activation": s.activation, "max_seq_length": s.max_len}


async def check_row_tokens(model: FrontDoorModel, rows: Sequence[tuple[str, str | None]], field: str) -> None:
    """The token cap (--max-request-tokens) of rows of a pair-core model (a reranker's pairs, a classifier's
    texts and pairs; a row's second text None: a single text): a row is at most the max length (cut, or
    refused by the front door with truncate false), and a token covers at least one UTF-8 byte; where that
    bound does not prove the request under the cap, the rows are tokenized here by the front door's own
    tokenizer (off the loop) and counted."""
    s, cap = model.served, model.admission.cfg.max_request_tokens
    # each row: its texts' bytes and its special tokens ([CLS] q [SEP] d [SEP], <s> ..)
    bound = sum(min(4 * len(a) + 4 + 4 * len(b or ""), s.max_len) for a, b in rows)
    if bound <= cap:
        return
    tok = s.tokenizer
    if tok is None:  # no tokenizer to count with: the bound decides
        raise ApiError(413, f"the input may be up to {bound} tokens; this gateway takes at most {cap} per request "
                       "(--max-request-tokens): split it", param=field, code="request_too_large")

    def count() -> int:   # single texts alone, pairs as pairs (as the front door tokenizes them)
        singles = [a for a, b in rows if b is None]
        pairs = [(a, b) for a, b in rows if b is not None]
        return ((int(tok.encode(singles, None, DEFAULT).lengths.sum()) if singles else 0)
                + (int(tok.encode([a for a, _ in pairs], [b for _, b in pairs], DEFAULT).lengths.sum()) if pairs else 0))

    model.admission.check_tokens(await model.admission.offload(sum(len(a) + len(b or "") for a, b in rows), count), field)


def tei_labels(kind, labels: list[str]) -> dict:
    """TEI's /info model_type of a model scoring per label: {its kind's name (TEI's tag): {id2label, label2id}}."""
    return {kind.name: {"id2label": {str(i): n for i, n in enumerate(labels)}, "label2id": {n: i for i, n in enumerate(labels)}}}
