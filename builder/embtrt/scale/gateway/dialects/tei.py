"""Hugging Face TEI 1.9's dialect: its error body and statuses, its response headers, its truncation fields,
and its request shapes of every operation it has (POST /embed, /embed_all, /similarity, /rerank, /predict,
/embed_sparse, /tokenize, /decode).

- embed, `tei` (POST /embed): `{inputs: str | [str] | [ids] | [[ids]], normalize?: true, truncate?: bool,
  truncation_direction?: right | left, prompt_name?, dimensions?}` -> `[[float, ...], ...]`. `truncate` absent or
  null is the build's --overflow (TEI's --auto-truncate) where the direction is right (the default), and cuts at
  the start where truncation_direction is left; true cuts on the side `truncation_direction` names, false refuses
  an over-long text. A batch is all texts or all token-id lists (TEI also takes both mixed in one request).
  `normalize` true L2-normalizes the vectors; false gives them as the model's reference gives them
  (`SentenceTransformer.encode`, which normalizes where the model has a Normalize module: TEI gives raw pooled
  vectors there).
- embed, `tei-all` (POST /embed_all on an embedder): /embed's body without normalize and dimensions -> each
  input's token embeddings `[[[float, ...] per token] per input]`, as `SentenceTransformer.encode(output_value=
  "token_embeddings")` gives them (every token, special ones and a prompt's included). Served by a build whose
  encoders return them (`--pooler python`); the default fused graph pools inside, so the default hot path pays
  nothing for it, and such a model answers 424 naming the rebuild.
- embed, `tei-similarity` (POST /similarity, and POST / with this body): `{inputs: {source_sentence, sentences},
  parameters?: {truncate, truncation_direction, prompt_name}}` -> each sentence's cosine similarity to the source
  sentence (`SentenceTransformer.similarity`), in order.
- classify, `tei` (POST /predict, and POST / where the default model is a classifier): `{inputs, raw_scores?,
  truncate?, truncation_direction?}`; `inputs` is a text (one input), a list of two texts (one pair), or a list of
  such lists (a batch of texts `[t]` and pairs `[a, b]`, mixed as TEI takes them: the texts and the pairs go to the
  front door as two calls) -> per input `[{score, label}]` highest first: one input's list, or a batch's list of
  lists. Scores: TEI's activation rule (softmax over several labels, sigmoid for one) except for a multi-label
  model, where transformers' sigmoid per label applies; `raw_scores` the logits.
- classify, `hf` (a /predict or / body with a `parameters` object: Hugging Face's task API, which
  InferenceClient.text_classification sends): `{inputs: text | [text], parameters: {top_k?, function_to_apply?:
  softmax | sigmoid | none}}` -> `[[{label, score}]]`, one list per text, highest first (the client reads the
  first list: every label, where TEI's flat list gives it the top one).
- rank, `tei` (POST /rerank): parse_rank.
- token_vectors, `tei-all` (POST /embed_all): `{inputs: str | [str], truncate?, truncation_direction?, prompt_name?,
  input_type?: query | document}` -> each input's token vectors `[[[float, ...] per token] per input]`: a
  multi-vector model's encode_document's (TEI returns raw hidden states: docs/multivector.md), `input_type: "query"`
  (an embtrt field) encode_query's. An embedder's /embed_all is its /embed body (parse_embed_all).
- tokenize, `tei-text` (POST /tokenize, /decode; TEI's error shape, without the compute headers TEI sends on its
  model routes only): `{inputs: str | [str], add_special_tokens?: true, prompt_name?}` -> `[[{id, text, special,
  start, stop}, ...], ...]`, one list per input; `start` / `stop` are UTF-8 byte offsets into the input with its
  prompt prepended, `text` those bytes (a special token's own string, its offsets null). /decode: `{ids: [id] |
  [[id]], skip_special_tokens?: true}` -> `[str, ...]`. A /tokenize body with `prompt` or `messages` is vLLM's.
- embed_sparse, `tei` (POST /embed_sparse): `{inputs: str | [str], truncate?: bool, truncation_direction?: "right" |
  "left", prompt_name?}` (and an optional `model`, which TEI has not) -> `[[{index, value}, ...], ...]`, one list
  per input, indices ascending; the tokens in the header `x-compute-tokens`. `truncate` false is the front door's
  truncate NONE (an over-long text is a 400), true or absent END, with `truncation_direction` left START.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from embtrt_backend.kinds import Kind
from embtrt_backend.pairs import truncation_direction

from ..errors import ApiError, check_bytes, empty, flag, json_object, short, text_list
from ..operation import Shape
from ..ops import classify, embed, rank, sparse, tokenize, tokens
from ..ops.tokenize import TokenizeRequest
from ..ops.embed import EmbeddingsModel, EmbeddingsRequest
from ..ops.late import parse as parse_late, refuse_here
from ..ops.classify import ClassifyModel, ClassifyRequest
from ..ops.sparse import SparseModel, SparseRequest
from ..ops.tokens import TokenRequest
from ..operation import Answer
from ..ops.rank import RerankModel, RerankRequest
from .cohere import parse_rank as parse_cohere_rank
from .vllm import parse_tokenize as parse_vllm_tokenize

TYPES = {400: "Validation", 401: "Unauthorized", 404: "Validation", 408: "Validation", 413: "Validation",
         429: "Overloaded", 499: "Validation", 503: "Unhealthy", 504: "Backend"}
BACKEND_CODES = ("wrong_model_kind", "wrong_operation")   # TEI: the model cannot serve the route


def error(exc: ApiError) -> tuple[int, dict]:
    """TEI's `{"error", "error_type"}`: an empty input 400 `Empty`; a bad field, an unknown model or a batch over
    --max-items 422 `Validation` (TEI 1.8 and older answered 413); a model that does not serve the route 424
    `Backend` (TEI: "Model is not an embedding model"), as an upstream failure; 429 `Overloaded`; 503 `Unhealthy`;
    the size caps 413."""
    if exc.code == "empty":
        return 400, {"error": exc.message, "error_type": "Empty"}
    if exc.code in BACKEND_CODES or exc.status in (500, 502):
        return 424, {"error": exc.message, "error_type": "Backend"}
    status = 422 if exc.status in (400, 404) else exc.status
    return status, {"error": exc.message, "error_type": TYPES.get(exc.status, "Validation")}


def headers(tokens: int, characters: int) -> list[tuple[bytes, bytes]]:
    """TEI's x-compute-tokens and x-compute-characters (the handler adds its type and times)."""
    return [(b"x-compute-tokens", str(tokens).encode()), (b"x-compute-characters", str(characters).encode())]


def timing(ms: float) -> list[tuple[bytes, bytes]]:
    """TEI's x-compute-type and its total time headers (milliseconds, both the same as TEI's)."""
    t = str(int(ms)).encode()
    return [(b"x-compute-type", b"embtrt"), (b"x-compute-time", t), (b"x-total-time", t)]


DIRECTIONS = {"right": "END", "left": "START"}   # TEI's truncation_direction -> the front door's truncate


def truncation(truncate: Any, direction: Any) -> str | None:
    """TEI's truncate (bool or null) and truncation_direction -> the front door's truncate (None: the build's)."""
    if direction is None:
        direction = "right"
    if not isinstance(direction, str) or direction.lower() not in DIRECTIONS:
        raise ApiError(400, f"truncation_direction must be 'right' or 'left', not {short(direction)}",
                       param="truncation_direction")
    if truncate is not None and not isinstance(truncate, bool):
        raise ApiError(400, f"truncate must be true, false or null, got {short(truncate)}", param="truncate")
    if truncate is False:
        return "NONE"
    if truncate is None and direction.lower() == "right":
        return None
    return DIRECTIONS[direction.lower()]


def parse_rank(body: Any, models: Mapping[str, RerankModel], kinds: Mapping[str, Kind], max_items: int,
               default: str | None = None) -> RerankRequest:
    """TEI's /rerank: `{query, texts, raw_scores?, return_text?, truncate?, truncation_direction?}` (and an optional
    `model`, which TEI has not) -> RerankRequest; rendered `[{index, score, text?}]`. A body with `documents` and no
    `texts` is vLLM's (its main rerank route): Cohere's shape, its `model` optional as TEI's, its errors vLLM's."""
    body = json_object(body)
    if body.get("texts") is None and "documents" in body:
        try:
            return parse_cohere_rank(body, models, kinds, max_items, default, optional=True)
        except ApiError as exc:
            exc.dialect = "vllm"
            raise
    name, m = rank.ranker(body, models, kinds, True, default)
    query = rank.query(body.get("query"), "query")
    docs = rank.documents(body.get("texts"), "texts", max_items, texts_only=True)
    given = body.get("truncation_direction", "right")
    direction = truncation_direction(given)
    if direction is None:
        raise ApiError(400, f"truncation_direction must be 'right' or 'left', not {given!r}",
                       param="truncation_direction")
    req = RerankRequest("tei", body.get("model"), name, query, docs, None, flag(body, "return_text", False),
                        "raw" if flag(body, "raw_scores", False) else "default", flag(body, "truncate", True), direction)
    return rank.finish(req, body, m, "query", "texts")


def render_rank(req: RerankRequest, scores: np.ndarray, tokens: int) -> tuple[Any, list]:
    """TEI's bare list; the tokens in its header."""
    order, values = rank.ranked(req, scores)
    docs = req.documents
    return ([{"index": i, "score": values[i], **({"text": docs[i]} if req.return_documents else {})} for i in order],
            headers(tokens, len(req.query) * len(docs) + sum(map(len, docs))))


FUNCTIONS = {"softmax": "softmax", "sigmoid": "sigmoid", "none": "raw"}   # HF's function_to_apply -> activation


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
    body = json_object(body)
    name, m = classify.classifier(body, models, kinds, cfg)
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
    classify.check(texts, pairs, m)
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
    classify.check(texts, None, m)
    return ClassifyRequest("hf", body.get("model"), name, texts, None, FUNCTIONS[fn] if fn else "default", top_k=top_k)


def render_classify(req: ClassifyRequest, labels: list[str], scores: np.ndarray, tokens: int) -> tuple[Any, list]:
    """TEI's per input `[{score, label}]` (one input's list, or a batch's), or the task API's `[[{label, score}]]`."""
    ranked = [[(labels[j], float(row[j])) for j in np.argsort(-row, kind="stable")] for row in scores.astype(np.float64)]
    if req.api == "hf":
        return [[{"label": lab, "score": s} for lab, s in r[:req.top_k]] for r in ranked], []
    out = [[{"score": s, "label": lab} for lab, s in r] for r in ranked]
    chars = sum(map(len, req.texts)) + sum(len(p or "") for p in req.pairs or ())
    return (out[0] if req.one else out), headers(tokens, chars)


def parse_sparse(body: Any, models: Mapping[str, SparseModel], kinds: Mapping[str, Kind], max_items: int,
                 default: str | None = None) -> SparseRequest:
    body = json_object(body)
    name, m = sparse.encoder(body, models, kinds, True, default)
    items = sparse.texts(body.get("inputs"), "inputs", max_items)
    direction = body.get("truncation_direction", "right")
    if not isinstance(direction, str) or direction.lower() not in DIRECTIONS:
        raise ApiError(400, f"truncation_direction must be 'right' or 'left', not {direction!r}",
                       param="truncation_direction")
    raw: dict[str, Any] = {"truncate": DIRECTIONS[direction.lower()] if flag(body, "truncate", True) else "NONE"}
    if body.get("prompt_name") is not None:
        raw["prompt_name"] = body["prompt_name"]
    return sparse.request("tei", body, name, m, items, "inputs", raw)


def render_sparse(req: SparseRequest, rows: sparse.Rows, tokens: int, token_of=None) -> tuple[Any, list]:
    """TEI's body is the bare lists; the tokens in a header, as its other routes."""
    return ([[{"index": i, "value": v} for i, v in zip(ix.tolist(), val.tolist())] for ix, val in rows],
            headers(tokens, sum(map(len, req.texts))))


def parse_token_vectors(body: Any, models: Mapping, kinds: Mapping[str, Kind], cfg):
    body = json_object(body)
    sent, implied = tokens.sent_model(body, models, cfg)
    if isinstance(models.get(implied or ""), EmbeddingsModel):   # an embedder's token embeddings: its /embed body
        return parse_embed_all(body, {n: m for n, m in models.items() if isinstance(m, EmbeddingsModel)}, kinds, cfg)
    name = tokens.resolve(body, tokens.heads(models, kinds), kinds, cfg)
    texts = text_list(body.get("inputs"), "inputs", cfg.max_items, tei=True,
                      hint=" (a multi-vector model takes texts, not token ids)")
    cut = truncation(body.get("truncate"), body.get("truncation_direction"))
    prompt = body.get("prompt_name")
    if prompt is not None and not isinstance(prompt, str):
        raise ApiError(400, "prompt_name must be a string", param="prompt_name")
    return TokenRequest("tei-all", sent, name, texts, tokens.text_side(body, "input_type", name, kinds[name]), prompt, cut)


async def answer_token_vectors(model, req) -> Answer:
    """Each input's token vectors, bare (an embedder's: its /embed body's request, answer_embed)."""
    if not isinstance(req, TokenRequest):
        return await answer_embed(model, req)
    got = await tokens.encode(model, req)
    return got.vectors, 8 * sum(v.size for v in got.vectors), headers(got.tokens, sum(map(len, req.texts)))


def _texts(items: Any, field: str, max_items: int, m: EmbeddingsModel, name: str) -> tuple[list[str] | None, list | None]:
    """TEI's inputs: a text, a list of texts, one token-id list, or a list of token-id lists -> (texts, ids)."""
    if items is None:
        raise ApiError(400, f"you must provide an {field} parameter", param=field)
    if isinstance(items, str):
        return [items], None
    if not isinstance(items, list):
        raise ApiError(400, f"{field} must be a string, a list of strings or token ids, got {short(items)}", param=field)
    if not items:
        raise empty(field)
    if all(embed.is_int(x) for x in items):
        items = [items]
    if len(items) > max_items:
        raise ApiError(400, f"batch size {len(items)} > maximum allowed batch size {max_items}", param=field)
    if all(isinstance(x, str) for x in items):
        return list(items), None
    if not all(isinstance(x, list) for x in items):
        raise ApiError(400, f"{field} must be texts or token-id lists, not both", param=field)
    if not m.token_ids:
        raise ApiError(400, "token-id input is off on this gateway: start it with --token-ids if the ids are "
                       f"{name}'s own", param=field, code="token_ids_disabled")
    return None, [embed.ids_of(x, i, name, m) for i, x in enumerate(items)]


def parse_embed(body: Any, models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind], cfg) -> EmbeddingsRequest:
    body = json_object(body)
    model, name, raw = embed.optional_model(body, models, kinds, cfg)
    m = models[name]
    texts, ids = _texts(body.get("inputs"), "inputs", cfg.max_items, m, name)
    raw.update({k: body[k] for k in ("prompt_name", "dimensions") if body.get(k) is not None})
    truncate = truncation(body.get("truncate"), body.get("truncation_direction"))
    if truncate is not None:
        raw["truncate"] = truncate
    if ids is not None and raw.get("prompt_name") is not None:
        raise ApiError(400, "token-id input is embedded as given: prompt_name applies to texts only", param="prompt_name")
    return EmbeddingsRequest(model, name, texts, ids, "float", embed.request_options(m, raw), "tei", flag(body, "normalize", True),
                             late=parse_late(body, texts, "inputs", raw, cfg.max_items))


def parse_embed_all(body: Any, models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind], cfg) -> EmbeddingsRequest:
    """TEI's /embed_all: /embed's body without normalize and dimensions (which do not apply to token vectors)."""
    req = parse_embed(body, models, kinds, cfg)
    if req.late is not None:
        raise ApiError(400, "late chunking gives a vector per chunk (/embed, /v1/embeddings), not token embeddings",
                       param="late_chunking")
    if req.options.dimensions is not None:
        raise ApiError(400, "dimensions does not apply to token embeddings", param="dimensions")
    return replace(req, api="tei-all", normalize=False)


def parse_similarity(body: Any, models: Mapping[str, EmbeddingsModel], kinds: Mapping[str, Kind], cfg) -> EmbeddingsRequest:
    body = json_object(body)
    refuse_here(body, "/similarity")
    model, name, raw = embed.optional_model(body, models, kinds, cfg)
    m = models[name]
    inputs = body.get("inputs")
    if not isinstance(inputs, dict):
        raise ApiError(400, 'inputs must be an object {"source_sentence": "...", "sentences": [...]}', param="inputs")
    source, sentences = inputs.get("source_sentence"), inputs.get("sentences")
    if not isinstance(source, str):
        raise ApiError(400, "inputs.source_sentence must be a string", param="inputs.source_sentence")
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        raise ApiError(400, "inputs.sentences must be a list of strings", param="inputs.sentences")
    if not sentences:
        raise empty("inputs.sentences")
    if len(sentences) + 1 > cfg.max_items:
        raise ApiError(400, f"batch size {len(sentences) + 1} > maximum allowed batch size {cfg.max_items}",
                       param="inputs.sentences")
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise ApiError(400, "parameters must be an object", param="parameters")
    if params.get("prompt_name") is not None:
        raw["prompt_name"] = params["prompt_name"]
    truncate = truncation(params.get("truncate"), params.get("truncation_direction"))
    if truncate is not None:
        raw["truncate"] = truncate
    return EmbeddingsRequest(model, name, [source, *sentences], None, "float", embed.request_options(m, raw), "tei-similarity")


async def answer_embed(model, req: EmbeddingsRequest) -> Answer:
    """TEI's bare vectors (L2-normalized where `normalize`), each sentence's similarity, or an embedder's token
    embeddings (/embed_all: a --pooler python build's encoders)."""
    chars = sum(map(len, req.texts or ()))
    if req.api == "tei-all":
        rows, tokens = await model.token_vectors(req.texts, req.ids, req.options)
        return rows, 8 * sum(r.size for r in rows), headers(tokens, chars)
    vecs, tokens = await embed.vectors(model, req)
    if req.api == "tei-similarity":
        u = embed.unit(vecs)
        return (u[1:] @ u[0]).astype(np.float64).tolist(), 16 * len(vecs), headers(tokens, chars)
    out = embed.unit(vecs) if req.normalize and vecs.dtype == np.float32 else vecs
    return out, 8 * out.size, headers(tokens, chars)


def parse_tokenize(body: Any, models: Mapping, kinds: Mapping[str, Kind], cfg, path: str) -> TokenizeRequest:
    """TEI's POST /tokenize (a body with `prompt` or `messages` is vLLM's: vllm.parse_tokenize) and /decode."""
    body = json_object(body)
    if path == "/tokenize" and ("prompt" in body or "messages" in body):
        return parse_vllm_tokenize(body, models, kinds, cfg, path)
    name = tokenize.served_name(body, models, cfg)
    if path == "/decode":
        ids = body.get("ids")
        if ids is None:
            raise ApiError(400, "you must provide an ids parameter", param="ids")
        if isinstance(ids, list) and not ids:
            raise empty("ids")
        rows = ids if isinstance(ids, list) and all(isinstance(x, list) for x in ids) else [ids]
        if len(rows) > cfg.max_items:
            raise ApiError(400, f"batch size {len(rows)} > maximum allowed batch size {cfg.max_items}", param="ids")
        return TokenizeRequest("tei-text", "decode", name, ids=[tokenize.id_list(r, "ids") for r in rows],
                               special=flag(body, "skip_special_tokens", True))
    texts = text_list(body.get("inputs"), "inputs", cfg.max_items, tei=True)
    check_bytes(texts, models[name].max_text_bytes, "inputs")
    prompt = ""
    given = body.get("prompt_name")
    if given is not None:   # the model's prompts (an embedder's or a sparse encoder's options; other kinds have none)
        prompts = getattr(getattr(models[name], "options", None), "prompts", None) or {}
        if not isinstance(given, str) or given not in prompts:
            raise ApiError(400, f"unknown prompt_name {short(given)}: {name}'s prompts are "
                           f"{', '.join(sorted(prompts)) or 'none'}", param="prompt_name")
        prompt = prompts[given]
    return TokenizeRequest("tei-text", "tokenize", name, texts, special=flag(body, "add_special_tokens", True),
                           prompt=prompt)


async def answer_tokenize(model, req: TokenizeRequest) -> Answer:
    """Each input's tokens `[{id, text, special, start, stop}]` (UTF-8 byte offsets into the input with its prompt),
    or each id list decoded."""
    tok = await tokenize.tokenizer(model, req)
    if req.what == "decode":
        return [tok.decode(r, skip_special_tokens=req.special) for r in req.ids or ()], 0, []
    texts = req.texts or []
    doc: Any = await model.admission.offload(sum(map(len, texts)),
                                             lambda: [tokenize.tokens(tok, req.prompt + t, req.special) for t in texts])
    return doc, 64 * sum(map(len, doc)), []


SHAPES = {
    ("embed", "tei"): Shape(lambda models, kinds, cfg, path, body: parse_embed(body, models, kinds, cfg), answer_embed),
    ("embed", "tei-similarity"): Shape(lambda models, kinds, cfg, path, body: parse_similarity(body, models, kinds, cfg),
                                       answer_embed),
    ("rank", "tei"): Shape(lambda models, kinds, cfg, path, body: parse_rank(body, models, kinds, cfg.max_items,
                                                                           cfg.default_model),
                           rank.answerer(render_rank)),
    ("classify", "tei"): Shape(lambda models, kinds, cfg, path, body: parse_predict(body, models, kinds, cfg),
                               classify.answerer(render_classify)),
    # the task API body on /predict (parse_predict tells it by its `parameters`) answers in its own shape
    ("classify", "hf"): Shape(lambda models, kinds, cfg, path, body: parse_predict(body, models, kinds, cfg),
                              classify.answerer(render_classify)),
    ("embed_sparse", "tei"): Shape(lambda models, kinds, cfg, path, body: parse_sparse(body, models, kinds, cfg.max_items,
                                                                                     cfg.default_model),
                                   sparse.answerer(render_sparse)),
    ("tokenize", "tei-text"): Shape(lambda models, kinds, cfg, path, body: parse_tokenize(body, models, kinds, cfg, path),
                                    answer_tokenize),
    ("token_vectors", "tei-all"): Shape(lambda models, kinds, cfg, path, body: parse_token_vectors(body, models, kinds, cfg),
                                        answer_token_vectors),
}
