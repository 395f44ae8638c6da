"""The classification of one classifier model behind the gateway (`Classifier`): a request's texts (or
text pairs) to the model's front door, which tokenizes, plans, runs and applies the activation itself,
in parts of at most its max batch sent concurrently; the scores back in input order, and the tokens
the front door reports as the usage. Every API shape (scale/gateway/dialects) comes here as one `ClassifyRequest` (ops/classify.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import CLASSIFIER

from ...scale.gateway.errors import ApiError
from ...scale.gateway.front_door import renamed
from ...scale.gateway.model import GatewayModel
from ...scale.gateway.served import ServedReranker
from ...scale.gateway.pairs import check_row_tokens, tei_labels
from ...serve import wire
from ...scale.gateway.ops.classify import ClassifyModel, ClassifyRequest


class ServedClassifier(ServedReranker):
    """A classifier: the reranker's record (labels, default activation, the front door's pair tokenizer,
    which tokenizes single texts too), its labels the front door's `labels` (config.json's id2label)."""

    def __init__(self, repo: Path) -> None:
        super().__init__(repo)
        self.labels = json.loads(self.door.get("labels") or "[]") or self.labels


class Classifier(GatewayModel):
    """The gateway of one classifier (repository): a request's texts, scored per label by its front door."""

    kind, does, value = CLASSIFIER, "classifies every text", "score"
    outputs, probe = ("SCORES", "TOKENS"), (False, [("embtrt readiness probe", None)])
    served_as = ServedClassifier

    @property
    def schema(self) -> ClassifyModel:
        s = self.served
        return ClassifyModel(tuple(s.labels), s.max_text_bytes)

    async def classify(self, req: ClassifyRequest) -> tuple[np.ndarray, int]:
        """-> (each row's scores [rows, labels], in input order; the tokens, as the front door counts them). A
        batch of single texts and pairs goes up as two calls (the front door takes TEXT_PAIR for all rows or none)."""
        pairs = req.pairs
        rows = list(zip(req.texts, pairs if pairs is not None else [None] * len(req.texts)))
        self.admission.check_count(sum(len(t) + len(p or "") for t, p in rows), req.field)
        await check_row_tokens(self, rows, req.field)
        params = {"activation": req.activation, "truncate": req.truncate, "truncation_direction": req.truncation_direction}
        kinds = [[i for i, (_, p) in enumerate(rows) if p is None], [i for i, (_, p) in enumerate(rows) if p is not None]]
        kinds = [k for k in kinds if k]
        if len(kinds) == 1:
            parts, tokens = await self.send(rows, rows[0][1] is not None, params, req.field)
            return (parts[0] if len(parts) == 1 else np.concatenate(parts)), tokens

        async def some(index: list[int]):
            try:
                parts, t = await self.send([rows[i] for i in index], rows[index[0]][1] is not None, params, req.field)
            except ApiError as exc:
                raise renamed(exc, req.field, index) from None
            return np.concatenate(parts), t

        done = await asyncio.gather(*(some(k) for k in kinds))
        out = np.empty((len(rows), self.served.num_labels), np.float32)
        for index, (scores, _) in zip(kinds, done):
            out[index] = scores
        return out, sum(t for _, t in done)

    def inputs(self, rows: list, pairs: bool) -> list:
        out = [wire.text_input([t for t, _ in rows], "TEXT")]
        return out + [wire.text_input([p for _, p in rows], "TEXT_PAIR")] if pairs else out

    def unpack(self, rows: list, outs: tuple) -> np.ndarray:
        (scores,), s = outs, self.served
        if scores.ndim != 2 or scores.shape != (len(rows), s.num_labels):
            raise ApiError(502, f"{s.name}'s front door answered SCORES of shape {list(scores.shape)} for "
                           f"{len(rows)} rows; expected [{len(rows)}, {s.num_labels}]", type_="server_error")
        return scores

    def tei_type(self) -> dict:
        """TEI's /info model_type: a classifier, its labels by index."""
        return tei_labels(self.kind, self.served.labels)

    def facts(self) -> dict:
        s = self.served
        return {"num_labels": s.num_labels, "labels": s.labels, "activation": s.activation, "max_seq_length": s.max_len}
