"""ClassifyClient: texts (or text pairs) -> each label's score over tritonclient gRPC.

One row per text goes to the classifier's front door as TEXT (with TEXT_PAIR beside it for pairs);
a call's texts go in requests of at most the front door's max batch size. Scores equal transformers'
model with the text-classification pipeline's activation (softmax over several labels, sigmoid per
label for one label or a multi-label model), or the logits with activation raw.
"""

from __future__ import annotations

import json

import numpy as np
from embtrt_backend.kinds import CLASSIFIER
from embtrt_backend.pairs import ACTIVATIONS   # the front door's: default, raw, softmax, sigmoid

from ...errors import ClientError
from ...serve.client import KindClient
from ...serve.wire import pair_params, text_input


class ClassifyClient(KindClient):
    KIND = CLASSIFIER.name

    def __init__(self, url: str = "127.0.0.1:8001", model: str = CLASSIFIER.name, **options) -> None:
        super().__init__(url, model, **options)

    @property
    def labels(self) -> list[str]:
        """The model's labels, by label id (its config.json's id2label)."""
        return json.loads(self.parameters()["labels"])

    def _infer(self, texts: list[str], pairs: list[str] | None, params: dict) -> tuple[np.ndarray, np.ndarray]:
        def call():
            inputs = [text_input(texts, "TEXT")] + ([text_input(pairs, "TEXT_PAIR")] if pairs is not None else [])
            r = self._c.infer(self.model, inputs, client_timeout=self.timeout_s, parameters=params or None)
            return r.as_numpy("SCORES"), r.as_numpy("TOKENS").reshape(-1)

        return self._retrying(call)

    def scores(self, texts: list[str], pairs: list[str] | None = None, *, activation: str = "default",
               truncate: bool = True, truncation_direction: str = "right") -> tuple[np.ndarray, np.ndarray]:
        """(scores [texts, labels], tokens per row) in input order; `pairs`: the second text of each row."""
        if isinstance(texts, str):
            raise ClientError("scores() takes a list of texts, got a single str", "wrap it: [text]")
        if not texts:
            raise ClientError("no texts to classify", "pass at least one text")
        if pairs is not None and len(pairs) != len(texts):
            raise ClientError(f"{len(texts)} texts and {len(pairs)} pairs: give one pair text per text")
        params = pair_params(activation, truncate, truncation_direction, allowed=ACTIVATIONS)
        bs = self.batch_size
        parts = [self._infer(list(texts[i:i + bs]), None if pairs is None else list(pairs[i:i + bs]), params)
                 for i in range(0, len(texts), bs)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def classify(self, texts: list[str], pairs: list[str] | None = None, top_k: int | None = None,
                 **options) -> list[list[dict]]:
        """Per text, [{label, score}] highest first (top_k: the best K), as the text-classification pipeline."""
        scores, _ = self.scores(texts, pairs, **options)
        labels = self.labels
        return [[{"label": labels[i], "score": float(row[i])} for i in np.argsort(-row, kind="stable")[:top_k]]
                for row in scores]

