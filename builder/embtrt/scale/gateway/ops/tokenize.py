"""The tokenize operation every served model takes (#51, #69 item 2): its own tokenizer (the front door's
tokenizer.json, without truncation or padding) over HTTP. The request shapes are TEI's (/tokenize, /decode:
dialects/tei.py) and vLLM's (/tokenize with `prompt`, /detokenize: dialects/vllm.py).

Decoding is the tokenizers library's (TEI's); transformers' decode may also clean up spaces before
punctuation (`clean_up_tokenization_spaces`), which neither TEI nor these routes do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ApiError, implied_model, short
from ..operation import Declared

OPERATIONS = (Declared("tokenize", "tokenize", "tokenize_latency", needs=()),)


@dataclass(frozen=True)
class TokenizeRequest:
    api: str                        # tei-text | vllm: the dialect of the response
    what: str                       # tokenize | decode
    served: str
    texts: list[str] | None = None
    ids: list[list[int]] | None = None
    special: bool = True            # add special tokens (tokenize) / skip them (TEI's decode)
    prompt: str = ""
    token_strs: bool = False
    field: str = "ids"              # the body's field of the ids (errors name it)


def served_name(body: dict, models: Mapping, cfg) -> str:
    model = body.get("model")
    if model is None:
        implied = implied_model(models, cfg.default_model)
        if implied is not None:
            return implied
        raise ApiError(400, "you must provide a model parameter (this gateway serves several models: "
                       + ", ".join(map(repr, models)) + ")", param="model")
    if not isinstance(model, str):
        raise ApiError(400, "model must be a string", param="model")
    if model not in models:
        raise ApiError(404, f"the model {model!r} does not exist; this gateway serves "
                       + ", ".join(map(repr, models)), param="model", code="model_not_found")
    return model


def id_list(ids: Any, field: str) -> list[int]:
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ApiError(400, f"{field} must be a list of token ids (integers >= 0), got {short(ids)}", param=field)
    return ids


def tokens(tok, text: str, special: bool) -> list[dict]:
    enc = tok.encode(text, add_special_tokens=special)
    raw = text.encode("utf-8")
    # character offsets (the tokenizers library's) -> UTF-8 byte offsets (TEI's)
    at = [0]
    for ch in text:
        at.append(at[-1] + len(ch.encode("utf-8")))
    out = []
    for tid, tok_s, sp, (a, b) in zip(enc.ids, enc.tokens, enc.special_tokens_mask, enc.offsets):
        if sp:
            out.append({"id": tid, "text": tok_s, "special": True, "start": None, "stop": None})
        else:
            s, e = at[a], at[b]
            out.append({"id": tid, "text": raw[s:e].decode("utf-8", "replace"), "special": False, "start": s, "stop": e})
    return out


async def tokenizer(model, req: TokenizeRequest):
    """The model's plain tokenizer, the request's ids checked against its vocabulary (a 400 naming the field), its
    texts against the gateway's per-request cap."""
    tok = model.served.plain_tokenizer
    vocab = tok.get_vocab_size(with_added_tokens=True)
    for row in req.ids or ():
        bad = next((t for t in row if t >= vocab), None)
        if bad is not None:
            raise ApiError(400, f"token id {bad} is outside the vocabulary (0..{vocab - 1})", param=req.field)
    if req.texts:
        model.admission.check_chars(req.texts)   # the gateway's per-request cap; a large request off the event loop
    return tok
