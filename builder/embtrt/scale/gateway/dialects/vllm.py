"""vLLM's dialect: its error body and its request shapes of every operation it has.

- rank, `vllm-score`: vLLM's score API, POST /score and its older spelling /v1/score (vLLM serves both):
  `{model?, queries | data_1 | text_1, documents | items | data_2 | text_2, use_activation?}` (tried in vLLM's
  order: queries+documents, queries+items, data_1+data_2, text_1+text_2); each side a string or a list of strings,
  paired 1 with 1, 1 with N (the one query against every document) or N with N (by position) -> `{id, object:
  "list", created, model, data: [{index, object: "score", score}], usage}` in pair order (not sorted, as vLLM).
  Scores are `CrossEncoder.predict`'s (the model's activation; with `use_activation: false` the raw logits). The
  pairs go to the front door as rows of (query, document), whatever their queries. Multimodal content parts are
  refused. (vLLM's rerank body on /rerank is Cohere's shape: tei.py.)
- classify, `vllm` (POST /classify): `{model?, input: text | [text], use_activation?}` -> `{id, object: list,
  created, model, data: [{index, label, probs, num_classes}], usage}`: `probs` in label-id order, `label` the top
  one. infinity's /classify (`{input: [text], raw_scores}` -> `{object: classify, data: [[{score, label}]]}`)
  shares the path with another shape: vLLM's is served (infinity is unmaintained since 2025-10).
- token_vectors, `vllm-pooling` (POST /pooling, `task: token_embed`): `{model?, input: str | [str], task?:
  "token_embed", embedding_mode?: query | document (vLLM PR #44530's field; default document), encoding_format?:
  float | base64, embed_dtype?: float32 | float16, truncate_prompt_tokens?: -1}` -> `{id, object: "list", created,
  model, data: [{index, object: "pooling", data}], usage}`, `data` a list of vectors or (base64) the row-major bytes
  of [count, dim] in embed_dtype, little-endian. A model whose input takes images (a page-image retriever) also
  takes vLLM's multimodal `messages`: one user message whose content is one image_url part (a data URI) -> that
  image's token vectors.
- tokenize, `vllm`: POST /tokenize with `prompt`: `{model?, prompt, add_special_tokens?: true, return_token_strs?:
  false}` -> `{count, max_model_len, tokens, token_strs}`; its chat form (`messages`) is refused: the models served
  here have no chat template. POST /detokenize: `{model?, tokens: [id]}` -> `{prompt}` (special tokens kept, as vLLM).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
from embtrt_backend.kinds import Kind

from ..errors import ApiError, check_bytes, empty, flag, json_object, short, text_list
from ..operation import Answer, Shape
from ..ops import classify, rank, tokenize, tokens
from ..ops.tokenize import TokenizeRequest
from ..ops.classify import ClassifyModel, ClassifyRequest
from ..ops.tokens import TokenRequest
from ..ops.rank import RerankModel, ScoreRequest

TYPES = {400: "BadRequestError", 401: "UnauthorizedError", 404: "NotFoundError", 408: "RequestTimeoutError",
         413: "BadRequestError", 422: "UnprocessableEntityError", 429: "TooManyRequestsError",
         501: "NotImplementedError", 503: "ServiceUnavailableError", 504: "GatewayTimeoutError"}
SPELLINGS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


def error(exc: ApiError) -> tuple[int, dict]:
    """vLLM's `{"error": {message, type, param, code}}`: `type` its exception's name, `code` the status."""
    return exc.status, {"error": {"message": exc.message, "type": TYPES.get(exc.status, "InternalServerError"),
                                  "param": exc.param, "code": exc.status}}


def _side(v: Any, field: str, max_items: int) -> list[str]:
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list):
        raise ApiError(400, f"{field} must be a string or a list of strings, got {short(v)}", param=field)
    if not v:
        raise empty(field)
    if len(v) > max_items:
        raise ApiError(400, f"{field} has {len(v)} items; at most {max_items} per request", param=field)
    for i, x in enumerate(v):
        if not isinstance(x, str):
            raise ApiError(400, f"{field}[{i}] must be a string (multimodal content is not served), got {short(x)}",
                           param=field)
    return v


def parse_score(body: Any, models: Mapping[str, RerankModel], kinds: Mapping[str, Kind], cfg) -> ScoreRequest:
    try:
        return _parse_score(body, models, kinds, cfg)
    except ApiError as exc:
        exc.dialect = "vllm"
        raise


def _parse_score(body: Any, models: Mapping[str, RerankModel], kinds: Mapping[str, Kind], cfg) -> ScoreRequest:
    body = json_object(body)
    name, m = rank.ranker(body, models, kinds, True, cfg.default_model, rank.SCORE_API)
    left, right = next(((a, b) for a, b in SPELLINGS if a in body and b in body), ("queries", "documents"))
    if body.get(left) is None or body.get(right) is None:
        raise ApiError(400, f"you must provide {left} and {right} (or data_1 / data_2, text_1 / text_2)",
                       param=left if body.get(left) is None else right)
    qs, ds = _side(body[left], left, cfg.max_items), _side(body[right], right, cfg.max_items)
    if len(qs) == 1:
        qs = qs * len(ds)
    if len(qs) != len(ds):
        raise ApiError(400, f"{left} has {len(qs)} items and {right} {len(ds)}: give one {left[:-1] if left.endswith('s') else left} "
                       f"or as many as {right}", param=right)
    tpt = body.get("truncate_prompt_tokens")
    if tpt not in (None, -1):
        raise ApiError(400, f"truncate_prompt_tokens {short(tpt)} is not served: pairs are cut at the model's max "
                       "length (-1)", param="truncate_prompt_tokens")
    act = body.get("use_activation")
    if act is not None and not isinstance(act, bool):
        raise ApiError(400, f"use_activation must be true, false or null, got {short(act)}", param="use_activation")
    check_bytes(qs, m.max_text_bytes, left)
    check_bytes(ds, m.max_text_bytes, right)
    return ScoreRequest("vllm-score", body.get("model"), name, list(zip(qs, ds)), "raw" if act is False else "default",
                        right, rank.instruction_of(body, m, name))


async def answer_score(model, req: ScoreRequest) -> Answer:
    """The pairs scored in pair order (the model's score_pairs: the caps once, a refused pair named by its index)."""
    more = {} if req.instruction is None else {"instruction": req.instruction}   # only a templated reranker takes one
    scores, tokens = await model.score_pairs(req.pairs, req.activation, req.field, **more)
    scores = scores[:, 0].astype(np.float64)
    return ({"id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
             "model": req.model if req.model is not None else req.served,
             "data": [{"index": i, "object": "score", "score": v} for i, v in enumerate(scores.tolist())],
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                       "prompt_tokens_details": None}}, 48 * len(req.pairs), [])


def parse_classify(body: Any, models: Mapping[str, ClassifyModel], kinds: Mapping[str, Kind], cfg) -> ClassifyRequest:
    try:
        body = json_object(body)
        name, m = classify.classifier(body, models, kinds, cfg)
        if "messages" in body:
            raise ApiError(400, "the chat form of /classify (messages) is not served; send input", param="messages")
        texts = text_list(body.get("input"), "input", cfg.max_items, hint=" (token ids are not served)")
        act = body.get("use_activation")
        if act is not None and not isinstance(act, bool):
            raise ApiError(400, f"use_activation must be true, false or null, got {short(act)}", param="use_activation")
        classify.check(texts, None, m, "input")
        return ClassifyRequest("vllm", body.get("model"), name, texts, None, "raw" if act is False else "default",
                               field="input")
    except ApiError as exc:
        exc.dialect = "vllm"
        raise


def render_classify(req: ClassifyRequest, labels: list[str], scores: np.ndarray, tokens: int) -> tuple[Any, list]:
    data = [{"index": i, "label": labels[int(np.argmax(row))], "probs": row.tolist(), "num_classes": len(labels)}
            for i, row in enumerate(scores.astype(np.float64))]
    return ({"id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
             "model": req.model if req.model is not None else req.served, "data": data,
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                       "prompt_tokens_details": None}}, [])


def parse_pooling(body: Any, models: Mapping, kinds: Mapping[str, Kind], cfg) -> TokenRequest:
    body = json_object(body)
    sent, _ = tokens.sent_model(body, models, cfg)
    name = tokens.resolve(body, tokens.heads(models, kinds), kinds, cfg)
    task = body.get("task")
    if task is not None and task != "token_embed":
        raise ApiError(400, f"task {short(task)}: a multi-vector model serves token_embed on /pooling", param="task")
    cut = body.get("truncate_prompt_tokens")
    if cut is not None and cut != -1:
        raise ApiError(400, "truncate_prompt_tokens: only -1 (cut at the model's length) is served", param="truncate_prompt_tokens")
    fmt, dtype = tokens.encoding(body)
    if body.get("messages") is not None:
        if body.get("input") is not None:
            raise ApiError(400, "send input (texts) or messages (an image), not both", param="messages")
        images = message_images(body["messages"], name, kinds[name])
        return TokenRequest("vllm-pooling", sent, name, [], encoding=fmt, dtype=dtype, images=images)
    texts = text_list(body.get("input"), "input", cfg.max_items)
    return TokenRequest("vllm-pooling", sent, name, texts, tokens.text_side(body, "embedding_mode", name, kinds[name]),
                        encoding=fmt, dtype=dtype)


def message_images(messages: Any, name: str, kind: Kind) -> tuple[str, ...]:
    """vLLM's /pooling `messages` (one user message whose content is one image_url part: one image's token vectors,
    for a model whose input takes images) -> its data URI; a 400 naming the field otherwise."""
    if not kind.image_input:
        raise ApiError(400, f"messages: {name!r} is {kind.label}: it takes texts in input", param="messages",
                       code="wrong_modality")
    msg = messages[0] if isinstance(messages, list) and len(messages) == 1 and isinstance(messages[0], dict) else None
    parts = msg.get("content") if msg is not None and msg.get("role", "user") == "user" else None
    if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], dict) \
            or parts[0].get("type") != "image_url" or not isinstance(parts[0].get("image_url"), dict):
        raise ApiError(400, 'messages must be one user message whose content is one image_url part '
                       f'([{{"role": "user", "content": [{{"type": "image_url", "image_url": {{"url": "data:..."}}}}]}}]), '
                       f"got {short(messages)}", param="messages")
    return (parts[0]["image_url"].get("url"),)


async def answer_pooling(model, req: TokenRequest) -> Answer:
    got = await tokens.encode(model, req)
    data = [{"index": i, "object": "pooling", "data": tokens.vectors(v, req)} for i, v in enumerate(got.vectors)]
    return ({"id": f"pool-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
             "model": req.model or req.served, "data": data,
             "usage": {"prompt_tokens": got.tokens, "total_tokens": got.tokens, "completion_tokens": 0,
                       "prompt_tokens_details": None}}, 8 * sum(v.size for v in got.vectors), [])


def parse_tokenize(body: Any, models: Mapping, kinds: Mapping[str, Kind], cfg, path: str) -> TokenizeRequest:
    """vLLM's POST /tokenize (a body with `prompt`; its chat form, `messages`, refused: the models served here have
    no chat template) and /detokenize."""
    try:
        body = json_object(body)
        name = tokenize.served_name(body, models, cfg)
        if path == "/detokenize":
            return TokenizeRequest("vllm", "decode", name, ids=[tokenize.id_list(body.get("tokens"), "tokens")],
                                   field="tokens")
        if "messages" in body:
            raise ApiError(400, "the chat form of /tokenize (messages) is not served: these models have no chat "
                           "template; send prompt", param="messages")
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise ApiError(400, f"prompt must be a string, got {short(prompt)}", param="prompt")
        check_bytes([prompt], models[name].max_text_bytes, "prompt", "prompt")
        return TokenizeRequest("vllm", "tokenize", name, [prompt], special=flag(body, "add_special_tokens", True),
                               token_strs=flag(body, "return_token_strs", False))
    except ApiError as exc:
        exc.dialect = "vllm"
        raise


async def answer_tokenize(model, req: TokenizeRequest) -> Answer:
    """`{count, max_model_len, tokens, token_strs}`, or the ids decoded `{prompt}` (special tokens kept, as vLLM)."""
    tok = await tokenize.tokenizer(model, req)
    if req.what == "decode":
        return {"prompt": tok.decode((req.ids or [[]])[0], skip_special_tokens=False)}, 0, []
    texts = req.texts or []
    enc = await model.admission.offload(sum(map(len, texts)), lambda: tok.encode(texts[0], add_special_tokens=req.special))
    return ({"count": len(enc.ids), "max_model_len": model.served.max_len, "tokens": enc.ids,
             "token_strs": enc.tokens if req.token_strs else None}, 8 * len(enc.ids), [])


SHAPES = {
    ("rank", "vllm-score"): Shape(lambda models, kinds, cfg, path, body: parse_score(body, models, kinds, cfg),
                                  answer_score),
    ("classify", "vllm"): Shape(lambda models, kinds, cfg, path, body: parse_classify(body, models, kinds, cfg),
                                classify.answerer(render_classify)),
    ("tokenize", "vllm"): Shape(lambda models, kinds, cfg, path, body: parse_tokenize(body, models, kinds, cfg, path),
                                answer_tokenize),
    ("token_vectors", "vllm-pooling"): Shape(lambda models, kinds, cfg, path, body: parse_pooling(body, models, kinds, cfg),
                                             answer_pooling),
}
