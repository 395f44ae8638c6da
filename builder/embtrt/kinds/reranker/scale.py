"""The reranking of one reranker model behind the gateway (`Reranker`): a request's pairs (its query
with each document) to the model's front door, which tokenizes, truncates, plans, scores and applies
the activation itself (docs/rerankers.md), in parts of at most its max batch sent concurrently; the
scores back in document order, and the tokens the front door reports (TOKENS) as the usage.

Every API shape (scale/gateway/dialects) comes here as one `RerankRequest` (ops/rank.py): one semantics behind the
routes."""

from __future__ import annotations

import numpy as np
from embtrt_backend.kinds import RERANKER

from ...serve import wire
from ...scale.gateway.errors import ApiError
from ...scale.gateway.model import GatewayModel
from ...scale.gateway.pairs import check_row_tokens, tei_labels
from ...scale.gateway.dialects import DOC_FIELDS
from ...scale.gateway.ops.rank import RerankModel, RerankRequest
from ...scale.gateway.served import ServedReranker


def _params(activation: str, truncate: bool, truncation_direction: str, instruction: str | None) -> dict:
    """A request's front-door parameters (embtrt_backend.pairs.PairOptions); the instruction only where given (a
    model without a prompt template refuses the name)."""
    return {"activation": activation, "truncate": truncate, "truncation_direction": truncation_direction,
            **({"instruction": instruction} if instruction is not None else {})}


class Reranker(GatewayModel):
    """The gateway of one reranker (repository): a request's pairs, scored by its front door."""

    kind, does, value = RERANKER, "scores every pair", "score"
    outputs, probe = ("SCORES", "TOKENS"), ("embtrt readiness probe", ["a document"])
    served_as = ServedReranker

    @property
    def schema(self) -> RerankModel:
        return RerankModel(self.served.num_labels, self.served.max_text_bytes, self.served.template is not None)

    async def rerank(self, req: RerankRequest) -> tuple[np.ndarray, int]:
        """-> (each document's score, in document order; the tokens scored, as the front door counts them)."""
        q, docs = req.query, req.documents
        self.admission.check_count(len(q) * len(docs) + sum(map(len, docs)), "documents")  # each pair: the query too
        await check_row_tokens(self, [(q, d) for d in docs], "documents")
        params = _params(req.activation, req.truncate, req.truncation_direction, req.instruction)
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
                          truncation_direction: str = "right", instruction: str | None = None) -> tuple[np.ndarray, int]:
        """Pairs of any queries -> (each pair's scores [pairs, labels] (the model's activation, or raw /
        softmax / sigmoid), in order; the tokens): the request's caps checked once, the pairs sent as rows
        (a refused one named `field[k]` by its index in the request)."""
        self.admission.check_count(sum(len(q) + len(d) for q, d in pairs), field)
        await check_row_tokens(self, pairs, field)
        parts, tokens = await self.send(pairs, None, _params(activation, truncate, truncation_direction, instruction), field)
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
