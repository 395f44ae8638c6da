"""The classify operation's bodies, pure (no server): TEI's /predict, vLLM's /classify and Hugging
Face's task API shape (what InferenceClient.text_classification posts), parsed into one
`ClassifyRequest` and rendered back in the shape they came in.

- `tei` (POST /predict, and POST / where the default model is a classifier): `{inputs, raw_scores?,
  truncate?, truncation_direction?}`; `inputs` is a text (one input), a list of two texts (one pair),
  or a list of such lists (a batch of texts `[t]` and pairs `[a, b]`, mixed as TEI takes them: the
  texts and the pairs go to the front door as two calls) -> per input `[{score, label}]`
  highest first: one input's list, or a batch's list of lists. Scores: TEI's activation rule (softmax
  over several labels, sigmoid for one) except for a multi-label model, where transformers' sigmoid
  per label applies; `raw_scores` the logits.
- `hf` (a /predict or / body with a `parameters` object: Hugging Face's task API, which
  InferenceClient.text_classification sends): `{inputs: text | [text], parameters: {top_k?,
  function_to_apply?: softmax | sigmoid | none}}` -> `[[{label, score}]]`, one list per text, highest
  first (the client reads the first list: every label, where TEI's flat list gives it the top one).
- `vllm` (POST /classify): `{model?, input: text | [text], use_activation?}` -> `{id, object: list,
  created, model, data: [{index, label, probs, num_classes}], usage}`: `probs` in label-id order,
  `label` the top one. infinity's /classify (`{input: [text], raw_scores}` -> `{object: classify,
  data: [[{score, label}]]}`) shares the path with another shape: vLLM's is served (infinity is
  unmaintained since 2025-10).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from embtrt_backend.kinds import CLASSIFIER, Kind

from ...scale.gateway.dialects import tei_headers
from ...scale.gateway.errors import ApiError, check_bytes, empty, flag, model_name, no_such_model, short, text_list
from ...scale.gateway.operation import Answer

FUNCTIONS = {"softmax": "softmax", "sigmoid": "sigmoid", "none": "raw"}   # HF's function_to_apply -> activation


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


def _model(body: dict, models: Mapping[str, ClassifyModel], kinds: Mapping[str, Kind], cfg) -> tuple[str, ClassifyModel]:
    name = model_name(body.get("model"), models, kinds, CLASSIFIER, optional=True, default=cfg.default_model)
    if name not in models:
        raise no_such_model(name, models, CLASSIFIER, "classifies with")
    return name, models[name]


def _tei_inputs(inputs: Any, max_items: int) -> tuple[list[str], list[str | None] | None, bool]:
    """TEI's predict inputs -> (texts, each one's pair text (None: a single text) or None for no pairs, one input)."""
    if isinstance(inputs, str):
        return [inputs], None, True
    if not isinstance(inputs, list):
        raise ApiError(400, f"inputs must be a text, a pair [text, text] or a list of them, got {short(inputs)}",
                       param="inputs")
    if not inputs:
        raise empty("inputs")
    if all(isinstance(x, str) for x in inputs):
        if len(inputs) > 2:
            raise ApiError(400, "inputs: a list of texts is one pair [text, text]; send a batch as a list of lists "
                           "[[text], [text, text], ...]", param="inputs")
        return [inputs[0]], (inputs[1:] or None), True
    if len(inputs) > max_items:
        raise ApiError(400, f"batch size {len(inputs)} > maximum allowed batch size {max_items}", param="inputs")
    for i, x in enumerate(inputs):
        if not isinstance(x, list) or not 1 <= len(x) <= 2 or not all(isinstance(t, str) for t in x):
            raise ApiError(400, f"inputs[{i}] must be [text] or [text, text], got {short(x)}", param="inputs")
    pairs = [x[1] if len(x) == 2 else None for x in inputs]
    return [x[0] for x in inputs], (pairs if any(p is not None for p in pairs) else None), False


def parse_predict(body: Any, models: Mapping[str, ClassifyModel], kinds: Mapping[str, Kind], cfg) -> ClassifyRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    name, m = _model(body, models, kinds, cfg)
    if isinstance(body.get("parameters"), dict):   # Hugging Face's task API shape
        return _parse_hf(body, name, m, cfg)
    texts, pairs, one = _tei_inputs(body.get("inputs"), cfg.max_items) if "inputs" in body else ([], None, False)
    if "inputs" not in body:
        raise ApiError(400, "you must provide an inputs parameter", param="inputs")
    direction = body.get("truncation_direction") or "right"
    if not isinstance(direction, str) or direction.lower() not in ("right", "left"):
        raise ApiError(400, f"truncation_direction must be 'right' or 'left', not {short(direction)}",
                       param="truncation_direction")
    trunc = body.get("truncate")
    if trunc is not None and not isinstance(trunc, bool):
        raise ApiError(400, f"truncate must be true, false or null, got {short(trunc)}", param="truncate")
    _check(texts, pairs, m)
    return ClassifyRequest("tei", body.get("model"), name, texts, pairs,
                           "raw" if flag(body, "raw_scores", False) else "default", trunc is not False,
                           direction.lower(), one)


def _parse_hf(body: dict, name: str, m: ClassifyModel, cfg) -> ClassifyRequest:
    p = body["parameters"]
    texts = text_list(body.get("inputs"), "inputs", cfg.max_items, tei=True)
    fn = p.get("function_to_apply")
    if fn is not None and (not isinstance(fn, str) or fn not in FUNCTIONS):
        raise ApiError(400, f"parameters.function_to_apply must be softmax, sigmoid or none, not {short(fn)}",
                       param="parameters.function_to_apply")
    top_k = p.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise ApiError(400, f"parameters.top_k must be an integer >= 1, got {short(top_k)}", param="parameters.top_k")
    _check(texts, None, m)
    return ClassifyRequest("hf", body.get("model"), name, texts, None, FUNCTIONS[fn] if fn else "default", top_k=top_k)


def parse_classify(body: Any, models: Mapping[str, ClassifyModel], kinds: Mapping[str, Kind], cfg) -> ClassifyRequest:
    try:
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        name, m = _model(body, models, kinds, cfg)
        if "messages" in body:
            raise ApiError(400, "the chat form of /classify (messages) is not served; send input", param="messages")
        texts = text_list(body.get("input"), "input", cfg.max_items, hint=" (token ids are not served)")
        act = body.get("use_activation")
        if act is not None and not isinstance(act, bool):
            raise ApiError(400, f"use_activation must be true, false or null, got {short(act)}", param="use_activation")
        _check(texts, None, m, "input")
        return ClassifyRequest("vllm", body.get("model"), name, texts, None, "raw" if act is False else "default",
                               field="input")
    except ApiError as exc:
        exc.dialect = "vllm"
        raise


def _check(texts: list[str], pairs: list[str | None] | None, m: ClassifyModel, field: str = "inputs") -> None:
    check_bytes(texts, m.max_text_bytes, field)
    if pairs is not None:
        check_bytes([p or "" for p in pairs], m.max_text_bytes, field)


def render(req: ClassifyRequest, labels: list[str], scores: np.ndarray, tokens: int) -> tuple[Any, list]:
    """One request's scores [rows, labels] in its shape."""
    values = scores.astype(np.float64)
    if req.api == "vllm":
        data = [{"index": i, "label": labels[int(np.argmax(row))], "probs": row.tolist(), "num_classes": len(labels)}
                for i, row in enumerate(values)]
        return ({"id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                 "model": req.model if req.model is not None else req.served, "data": data,
                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                           "prompt_tokens_details": None}}, [])
    ranked = [[(labels[j], float(row[j])) for j in np.argsort(-row, kind="stable")] for row in values]
    if req.api == "hf":
        return [[{"label": lab, "score": s} for lab, s in r[:req.top_k]] for r in ranked], []
    out = [[{"score": s, "label": lab} for lab, s in r] for r in ranked]
    chars = sum(map(len, req.texts)) + sum(len(p or "") for p in req.pairs or ())
    return (out[0] if req.one else out), tei_headers(tokens, chars)


async def answer(model, req: ClassifyRequest) -> Answer:
    scores, tokens = await model.classify(req)
    doc, headers = render(req, model.served.labels, scores, tokens)
    return doc, 48 * scores.size, headers
