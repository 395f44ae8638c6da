"""embtrt's own dialect, where no anchor has the operation (its errors are OpenAI's envelope).

- embed_sparse, `embtrt`: POST /v1/sparse: `{model, input: str | [str], input_type?: query | document | passage,
  prompt_name?, truncate?: END | START | NONE, max_active_dims?, return_tokens?: bool}` -> `{object: "list", model,
  data: [{object: "sparse_embedding", index, indices, values, tokens?}], usage: {prompt_tokens, total_tokens}}`;
  with return_tokens, `tokens` holds each active dimension's vocabulary token (as SparseEncoder.decode names them),
  in the order of `indices`.
- encode, `embtrt`: POST /v1/encode, FlagEmbedding's BGEM3FlagModel.encode over HTTP: `{model?, input: str | [str],
  return_dense?: true, return_sparse?: false, return_colbert_vecs?: false, encoding_format?, embed_dtype?}` ->
  `{object: "list", model, data: [{index, dense_vecs?, lexical_weights?: {token id: w}, colbert_vecs?}], usage}`,
  all asked outputs from one encoder pass. A ColBERT model answers colbert_vecs only (with `input_type` query |
  document).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from embtrt_backend.kinds import Kind

from ..errors import ApiError, flag, json_object, text_list
from ..operation import Answer, Shape
from embtrt_backend.token_vectors import M3_ALL, VECTORS

from ..ops import sparse, tokens
from ..ops.tokens import TokenRequest
from ..ops.sparse import SparseModel, SparseRequest

# /v1/sparse's fields that are the front door's request parameters (embtrt_backend.sparse_weights.resolve)
PARAMETERS = ("input_type", "prompt_name", "truncate", "max_active_dims", "dimensions", "embedding_type")


def parse_sparse(body: Any, models: Mapping[str, SparseModel], kinds: Mapping[str, Kind], max_items: int,
                 default: str | None = None) -> SparseRequest:
    body = json_object(body)
    name, m = sparse.encoder(body, models, kinds, False, default)
    items = sparse.texts(body.get("input"), "input", max_items)
    raw = {k: body[k] for k in PARAMETERS if body.get(k) is not None}
    return sparse.request("embtrt", body, name, m, items, "input", raw, flag(body, "return_tokens", False))


def render_sparse(req: SparseRequest, rows: sparse.Rows, tokens: int,
                  token_of: Callable[[int], str | None] | None = None) -> tuple[Any, list]:
    """`token_of`: a vocabulary index's token string (the model's tokenizer), for a request with return_tokens."""
    data: list[dict[str, Any]] = [{"object": "sparse_embedding", "index": n, "indices": ix.tolist(), "values": val.tolist()}
                                  for n, (ix, val) in enumerate(rows)]
    if req.return_tokens:
        if token_of is None:
            raise ValueError("return_tokens needs the model's vocabulary (token_of)")
        for d in data:
            d["tokens"] = [token_of(int(i)) for i in d["indices"]]
    return ({"object": "list", "model": req.model, "data": data,
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, [])


def parse_encode(body: Any, models: Mapping, kinds: Mapping[str, Kind], cfg) -> TokenRequest:
    body = json_object(body)
    name = tokens.resolve(body, models, kinds, cfg, "encode")
    m3 = models[name].layout == "m3"
    dense, sparse = flag(body, "return_dense", m3), flag(body, "return_sparse", False)
    colbert = flag(body, "return_colbert_vecs", not m3)
    if not m3 and (dense or sparse):
        raise ApiError(400, f"{name!r} is a ColBERT model: it has colbert_vecs only", param="return_dense" if dense else "return_sparse")
    outputs = (("DENSE",) if dense else ()) + (("SPARSE_INDICES", "SPARSE_VALUES") if sparse else ()) + (VECTORS if colbert else ())
    if not outputs:
        raise ApiError(400, "ask for at least one of return_dense, return_sparse, return_colbert_vecs", param="return_dense")
    fmt, dtype = tokens.encoding(body)
    texts = text_list(body.get("input"), "input", cfg.max_items)
    return TokenRequest("embtrt", body.get("model"), name, texts, tokens.side(body.get("input_type"), "input_type"),
                        outputs=tuple(o for o in M3_ALL if o in outputs), encoding=fmt, dtype=dtype)


async def answer_encode(model, req: TokenRequest) -> Answer:
    got = await model.encode_texts(req.texts, req.side, req.outputs, "input")
    data = []
    for i in range(len(req.texts)):
        row: dict[str, Any] = {"index": i}
        if got.dense is not None:
            row["dense_vecs"] = tokens.vectors(got.dense[i], req)
        if got.sparse is not None:
            ids, w = got.sparse[i]
            row["lexical_weights"] = {str(int(k)): float(x) for k, x in zip(ids, w)}
        if got.vectors is not None:
            row["colbert_vecs"] = tokens.vectors(got.vectors[i], req)
        data.append(row)
    size = 8 * (sum(v.size for v in got.vectors or ()) + (got.dense.size if got.dense is not None else 0)) + 32 * len(data)
    return ({"object": "list", "model": req.model or req.served, "data": data,
             "usage": {"prompt_tokens": got.tokens, "total_tokens": got.tokens}}, size, [])


SHAPES = {
    ("embed_sparse", "embtrt"): Shape(lambda models, kinds, cfg, path, body: parse_sparse(body, models, kinds, cfg.max_items),
                                      sparse.answerer(render_sparse)),
    ("encode", "embtrt"): Shape(lambda models, kinds, cfg, path, body: parse_encode(body, models, kinds, cfg),
                                answer_encode),
}
