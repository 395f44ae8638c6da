"""The tokenize operation every served model takes (#51): its own tokenizer (the front door's
tokenizer.json, without truncation or padding) over HTTP, in TEI's and vLLM's shapes.

- TEI `POST /tokenize`: `{inputs: str | [str], add_special_tokens?: true, prompt_name?}` ->
  `[[{id, text, special, start, stop}, ...], ...]`, one list per input; `start` / `stop` are UTF-8 byte
  offsets into the input with its prompt prepended, `text` those bytes (a special token's own string,
  its offsets null).
- TEI `POST /decode`: `{ids: [id] | [[id]], skip_special_tokens?: true}` -> `[str, ...]`.
- vLLM `POST /tokenize` (a body with `prompt`): `{model?, prompt, add_special_tokens?: true,
  return_token_strs?: false}` -> `{count, max_model_len, tokens, token_strs}`; its chat form
  (`messages`) is refused: the models served here have no chat template.
- vLLM `POST /detokenize`: `{model?, tokens: [id]}` -> `{prompt}` (special tokens kept, as vLLM).

Decoding is the tokenizers library's (TEI's); transformers' decode may also clean up spaces before
punctuation (`clean_up_tokenization_spaces`), which neither TEI nor this route does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .errors import ApiError, check_bytes, empty, flag, implied_model, short, text_list
from .operation import Answer, Operation

# tei-text: TEI's error shape, without the compute headers TEI sends on its model routes only


@dataclass(frozen=True)
class TokenizeRequest:
    api: str                        # tei-tokenize | tei-decode | vllm-tokenize | vllm-detokenize
    served: str
    texts: list[str] | None = None
    ids: list[list[int]] | None = None
    special: bool = True            # add special tokens (tokenize) / skip them (TEI's decode)
    prompt: str = ""
    token_strs: bool = False


def _name(body: dict, models: Mapping, cfg) -> str:
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


def _id_list(ids: Any, field: str) -> list[int]:
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ApiError(400, f"{field} must be a list of token ids (integers >= 0), got {short(ids)}", param=field)
    return ids


def parse(models: Mapping, kinds, cfg, path: str, body: Any) -> TokenizeRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    vllm = path == "/detokenize" or (path == "/tokenize" and ("prompt" in body or "messages" in body))
    try:
        return _parse(models, cfg, path, body, vllm)
    except ApiError as exc:
        exc.dialect = "vllm" if vllm else None
        raise


def _parse(models: Mapping, cfg, path: str, body: dict, vllm: bool) -> TokenizeRequest:
    name = _name(body, models, cfg)
    if path == "/decode":
        ids = body.get("ids")
        if ids is None:
            raise ApiError(400, "you must provide an ids parameter", param="ids")
        if isinstance(ids, list) and not ids:
            raise empty("ids")
        rows = ids if isinstance(ids, list) and all(isinstance(x, list) for x in ids) else [ids]
        if len(rows) > cfg.max_items:
            raise ApiError(400, f"batch size {len(rows)} > maximum allowed batch size {cfg.max_items}", param="ids")
        return TokenizeRequest("tei-decode", name, ids=[_id_list(r, "ids") for r in rows],
                               special=flag(body, "skip_special_tokens", True))
    if path == "/detokenize":
        return TokenizeRequest("vllm-detokenize", name, ids=[_id_list(body.get("tokens"), "tokens")])
    if vllm:
        if "messages" in body:
            raise ApiError(400, "the chat form of /tokenize (messages) is not served: these models have no chat "
                           "template; send prompt", param="messages")
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise ApiError(400, f"prompt must be a string, got {short(prompt)}", param="prompt")
        check_bytes([prompt], models[name].max_text_bytes, "prompt", "prompt")
        return TokenizeRequest("vllm-tokenize", name, [prompt], special=flag(body, "add_special_tokens", True),
                               token_strs=flag(body, "return_token_strs", False))
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
    return TokenizeRequest("tei-tokenize", name, texts, special=flag(body, "add_special_tokens", True), prompt=prompt)


def _tokens(tok, text: str, special: bool) -> list[dict]:
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


async def answer(model, req: TokenizeRequest) -> Answer:
    tok = model.served.plain_tokenizer
    vocab = tok.get_vocab_size(with_added_tokens=True)
    for row in req.ids or ():
        bad = next((t for t in row if t >= vocab), None)
        if bad is not None:
            raise ApiError(400, f"token id {bad} is outside the vocabulary (0..{vocab - 1})",
                           param="tokens" if req.api == "vllm-detokenize" else "ids")
    texts = req.texts or []
    size = sum(map(len, texts))
    if texts:
        model.admission.check_chars(texts)   # the gateway's per-request cap; a large request off the event loop
    if req.api == "tei-tokenize":
        doc: Any = await model.admission.offload(size, lambda: [_tokens(tok, req.prompt + t, req.special) for t in texts])
        return doc, 64 * sum(map(len, doc)), []
    if req.api == "vllm-tokenize":
        enc = await model.admission.offload(size, lambda: tok.encode(texts[0], add_special_tokens=req.special))
        return ({"count": len(enc.ids), "max_model_len": model.served.max_len, "tokens": enc.ids,
                 "token_strs": enc.tokens if req.token_strs else None}, 8 * len(enc.ids), [])
    if req.api == "tei-decode":
        return [tok.decode(r, skip_special_tokens=req.special) for r in req.ids or ()], 0, []
    return {"prompt": tok.decode((req.ids or [[]])[0], skip_special_tokens=False)}, 0, []


OPERATIONS = (Operation("tokenize", "tokenize", "tokenize_latency", parse, answer),)
