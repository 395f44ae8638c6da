"""The classify operation (#69 item 2): what every classify route's request is, whatever its dialect (TEI's
/predict and Hugging Face's task shape on it: dialects/tei.py; vLLM's /classify: dialects/vllm.py), and what a
model serving it is asked: each input's scores over the model's labels."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from embtrt_backend.kinds import Kind, of_operation

from ..errors import check_bytes, model_name, no_such_model
from ..operation import Answer, Declared

NAME, LATENCY = "classify", "classify_latency"
NEEDS = (("classify",),)
CLASSIFIER = of_operation(NAME)   # the kind its messages name
OPERATIONS = (Declared(NAME, CLASSIFIER.metric_route, LATENCY, NEEDS),)


@dataclass(frozen=True)
class ClassifyModel:
    labels: tuple[str, ...]
    max_text_bytes: int


@dataclass(frozen=True)
class ClassifyRequest:
    api: str                          # tei | hf | vllm
    model: str | None
    served: str
    texts: list[str]
    pairs: list[str | None] | None    # each text's second text (None: a single text), or None (single texts only)
    activation: str = "default"       # default | raw | softmax | sigmoid
    truncate: bool = True
    truncation_direction: str = "right"
    one: bool = False                 # TEI: one input sent (a text or a pair): its list, not a batch's
    top_k: int | None = None          # hf: the best K labels
    field: str = "inputs"


def classifier(body: dict, models: Mapping[str, ClassifyModel], kinds: Mapping[str, Kind], cfg) -> tuple[str, ClassifyModel]:
    """(the served name, its schema) of a body's optional `model` (the only model, else --default-model)."""
    name = model_name(body.get("model"), models, kinds, CLASSIFIER, optional=True, default=cfg.default_model)
    if name not in models:
        raise no_such_model(name, models, CLASSIFIER, "classifies with")
    return name, models[name]


def check(texts: list[str], pairs: list[str | None] | None, m: ClassifyModel, field: str = "inputs") -> None:
    check_bytes(texts, m.max_text_bytes, field)
    if pairs is not None:
        check_bytes([p or "" for p in pairs], m.max_text_bytes, field)


def answerer(render: Callable[[ClassifyRequest, list[str], np.ndarray, int], tuple[Any, list]]):
    """The answer of a classify shape whose response `render` writes: (request, labels, scores [rows, labels], tokens)."""
    async def answer(model, req: ClassifyRequest) -> Answer:
        scores, tokens = await model.classify(req)
        doc, headers = render(req, model.served.labels, scores, tokens)
        return doc, 48 * scores.size, headers
    return answer
