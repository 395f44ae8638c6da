"""The image input (a part): images in the embed operation's request shapes (the embed parsers call these),
each as its anchor sends them:

- NIM's and OpenAI-style `/v1/embeddings`, and infinity's `/embeddings`: `modality` "text" or "image", one
  value for the batch or one per input (NIM), `input` items being texts or images as data URIs
  (`data:image/<type>;base64,...`); "text_image" (a text and an image fused in one input) needs a VLM
  embedder: a two-tower model refuses it, naming the modality.
- Cohere's `/v2/embed` (and `/v1/embed`): `images` (data URIs, input_type "image") instead of `texts`, or
  (v2) `inputs`, each `{"content": [parts]}`: one text part or one image_url part, or (a VLM embedder) one of
  each, fused in one input; a two-tower model refuses the fused input, naming why.
- vLLM's chat-style embeddings on `/v1/embeddings` (a VLM embedder): `messages` instead of `input`, one
  conversation -> one vector: a system message (its instruction) and one user message whose content is a
  string or text and image_url parts (at most one image: one text and one image is the fused input).
- A VLM embedder's instruction per request: the system message, or `instruction` beside `input` / `inputs`
  (embtrt's field; the openai client sends it in extra_body).

Modality is always explicit: a string that looks like a data URI or a URL is a text unless the request says
it is an image. An http(s) URL is never fetched (400 saying so). The parsers decode the base64 (a bad one is
a 400 naming the item) and pass the encoded file to the front door, which decodes the image."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from embtrt_backend.kinds import Kind

from .errors import ApiError, check_bytes, short

MODALITIES = ("text", "image", "text_image")
FUSED = ("a text and an image fused in one input needs a VLM embedder; {name} has two towers and embeds each "
         "alone: send the text and the image as separate inputs")
FUSED_SHAPES = ("{name} takes a text fused with an image as Cohere v2's inputs (one text part and one image_url part) "
                "or vLLM's messages on /v1/embeddings; modality text_image (NIM's encoding in one string) is not read")


@dataclass(frozen=True)
class Fused:
    """A fused input's image: the request's text at the same index goes with it (one input, one vector)."""

    image: bytes


def fused_refusal(m, name: str) -> str:
    """Why a fused input is refused: a two-tower model cannot embed it; a VLM embedder (`fused` in its schema) takes it
    in the shapes named."""
    return (FUSED_SHAPES if getattr(m, "fused", False) else FUSED).format(name=name)


def instruction(body: dict, m, name: str) -> str | None:
    """A VLM embedder's `instruction` field (None where absent); 400 for a model that takes none, or not a string."""
    value = body.get("instruction")
    if value is None:
        return None
    if not getattr(m, "fused", False):
        raise ApiError(400, f"instruction is a VLM embedder's; {name} takes none", param="instruction")
    if not isinstance(value, str) or not value.strip():
        raise ApiError(400, f"instruction must be a non-empty string, got {short(value)}", param="instruction")
    check_bytes([value], m.max_text_bytes, "instruction", name="instruction")
    return value


def takes_images(m) -> bool:
    return bool(getattr(m, "images", False))


def modalities(value: Any, n: int, field: str = "modality") -> list[str] | None:
    """A body's `modality` (absent: None, every item a text) -> one modality per item; a 400 naming the field."""
    if value is None:
        return None
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise ApiError(400, f"{field} must be one of {', '.join(MODALITIES)}, or a list of them, got {short(value)}",
                       param=field)
    bad = next((v for v in values if v not in MODALITIES), None)
    if bad is not None:
        raise ApiError(400, f"{field} must be one of {', '.join(MODALITIES)}, not {short(bad)}", param=field)
    if len(values) not in (1, n):
        raise ApiError(400, f"{field} has {len(values)} values for {n} inputs: give one for the batch or one per input",
                       param=field)
    return values * n if len(values) == 1 else list(values)


def image_bytes(value: Any, k: int, field: str, max_bytes: int) -> bytes:
    """One image item (a data URI, or bare base64) -> its encoded file; a 400 naming `field[k]`."""
    from embtrt_backend import InputError
    from embtrt_backend.images import from_data_uri

    if not isinstance(value, str):
        raise ApiError(400, f"{field}[{k}]: an image is a data URI string (data:image/png;base64,...), got {short(value)}",
                       param=field)
    if len(value) > max_bytes * 4 // 3 * 78 // 76 + 64:   # base64 of max_bytes, with line breaks every 76 characters
        raise ApiError(400, f"{field}[{k}]: the image is over {max_bytes} bytes (base64: {len(value)} characters)",
                       param=field)
    try:
        data = from_data_uri(value, k)
    except InputError as exc:
        raise ApiError(400, f"{field}[{k}]: {str(exc).split(': ', 1)[-1]}", param=field) from None
    if not data:
        raise ApiError(400, f"{field}[{k}]: an empty image", param=field)
    if len(data) > max_bytes:
        raise ApiError(400, f"{field}[{k}]: the image file is {len(data)} bytes, over the limit of {max_bytes}", param=field)
    return data


def media(items: list, mods: list[str] | None, m, name: str, kind: Kind, field: str = "input",
          max_bytes: int = 8 << 20) -> tuple:
    """Per item: an image's encoded bytes, or None for a text; () where every item is a text. A model that
    takes no images, a fused modality, or a bad image: a 400 naming the item."""
    if mods is None or all(x == "text" for x in mods):
        return ()
    if "text_image" in mods:
        raise ApiError(400, f"modality text_image: {fused_refusal(m, name)}", param="modality")
    if not takes_images(m):
        k = mods.index("image")
        raise ApiError(400, f"{field}[{k}] is an image, but {name} is {kind.label}: it embeds texts only",
                       param=field, code="wrong_modality")
    return tuple(image_bytes(x, k, field, max_bytes) if mod == "image" else None for k, (x, mod) in enumerate(zip(items, mods)))


def cohere_items(body: dict, version: str, m, name: str, kind: Kind, max_items: int) -> tuple[list[str], tuple] | None:
    """Cohere's `images` or (v2) `inputs` -> (items, media), or None where the body has neither (texts)."""
    images, inputs = body.get("images"), body.get("inputs")
    if images is None and inputs is None:
        return None
    if body.get("texts") is not None or (images is not None and inputs is not None):
        raise ApiError(400, "send one of texts, images or inputs", param="images" if images is not None else "inputs")
    if inputs is not None and version != "cohere-v2":
        raise ApiError(400, "inputs is served on /v2/embed (Cohere's v2 API)", param="inputs")
    field = "images" if images is not None else "inputs"
    value = images if images is not None else inputs
    if not isinstance(value, list) or not value:
        raise ApiError(400, f"{field} must be a non-empty list", param=field)
    if len(value) > max_items:
        raise ApiError(400, f"{field} has {len(value)} items; at most {max_items} per request", param=field)
    if images is not None:
        return list(images), media(list(images), ["image"] * len(images), m, name, kind, field)
    items: list[str] = []
    mods: list[str] = []
    fused: dict[int, str] = {}
    for k, inp in enumerate(value):
        parts = inp.get("content") if isinstance(inp, dict) else None
        if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
            raise ApiError(400, f"inputs[{k}] must be {{\"content\": [parts]}}, got {short(inp)}", param="inputs")
        if len(parts) > 1 and not getattr(m, "fused", False):
            raise ApiError(400, f"inputs[{k}] has {len(parts)} content parts: {fused_refusal(m, name)}", param="inputs")
        text, image = content(parts, f"inputs[{k}].content", "inputs")
        if text is not None and image is not None:
            fused[k] = text
        items.append((text if image is None else image) or "")   # content() gives at least one of them
        mods.append("text" if image is None else "image")
    found = media(items, mods, m, name, kind, "inputs")
    if fused:   # a fused input: its text in items, its image (decoded above) beside it
        items = [fused.get(k, x) for k, x in enumerate(items)]
        found = tuple(Fused(x) if k in fused else x for k, x in enumerate(found))
    return items, found


def content(parts: list, where: str, param: str) -> tuple[str | None, str | None]:
    """A message's or an input's content parts -> (its text, its image's URL), either None where absent; at most one
    of each (a fused input is one text and one image), else a 400 naming `where`."""
    texts, images = [], []
    for j, part in enumerate(parts):
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "image_url" and isinstance(part.get("image_url"), (dict, str)):
            url = part["image_url"]
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str) or not url:   # a part without its image: never read as a text
                raise ApiError(400, f"{where}[{j}]: an image_url part's url is a data URI string "
                               f"(data:image/png;base64,...), got {short(url)}", param=param)
            images.append(url)
        else:
            raise ApiError(400, f"{where}[{j}] must be a text part or an image_url part, got {short(part)}", param=param)
    if len(images) > 1:
        raise ApiError(400, f"{where} has {len(images)} images: a fused input is one text and one image", param=param)
    if len(texts) > 1:
        raise ApiError(400, f"{where} has {len(texts)} text parts: a fused input is one text and one image", param=param)
    return (texts[0] if texts else None), (images[0] if images else None)


def messages_input(body: dict, m, name: str, kind: Kind) -> tuple[list[str], tuple, str | None, int]:
    """vLLM's chat-style embedding body (`messages`, one conversation -> one vector) -> (items, media, its
    instruction: the system message's text, None where it has none; the user message's index); a 400 naming the
    message at fault."""
    msgs = body.get("messages")
    if not getattr(m, "fused", False):
        raise ApiError(400, f"messages (vLLM's chat-style embeddings) is served for VLM embedders; {name} is {kind.label}: "
                       "send input", param="messages")
    if body.get("input") is not None:
        raise ApiError(400, "send input or messages, not both", param="messages")
    if body.get("late_chunking") not in (None, False):
        raise ApiError(400, "late_chunking applies to input texts, not to messages", param="late_chunking")
    if not isinstance(msgs, list) or not msgs or not all(isinstance(x, dict) for x in msgs):
        raise ApiError(400, f"messages must be a non-empty list of messages, got {short(msgs)}", param="messages")
    system, user, at = None, None, 0
    for j, msg in enumerate(msgs):
        role, parts = msg.get("role"), msg.get("content")
        parts = [{"type": "text", "text": parts}] if isinstance(parts, str) else parts
        if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
            raise ApiError(400, f"messages[{j}].content must be a string or a list of content parts, got {short(msg.get('content'))}",
                           param="messages")
        if role == "system" and system is None and user is None:
            system, image = content(parts, f"messages[{j}].content", "messages")
            if image is not None or system is None:
                raise ApiError(400, f"messages[{j}]: a system message is the instruction, a text only", param="messages")
            if not system.strip():
                raise ApiError(400, f"messages[{j}]: an empty system message (the instruction): leave it out for the "
                               "model's default", param="messages")
        elif role == "user" and user is None:
            user, at = content(parts, f"messages[{j}].content", "messages"), j
        else:
            raise ApiError(400, f"messages[{j}]: the role {short(role)} is not taken here; an embedding conversation is an "
                           "optional system message (the instruction), then one user message", param="messages")
    if user is None:
        raise ApiError(400, "messages has no user message: it holds the text, the image, or both", param="messages")
    text, url = user
    if url is None:
        return [text or ""], (), system, at
    data = image_bytes(url, at, "messages", getattr(m, "max_image_bytes", 8 << 20))
    return [text if text is not None else url], (Fused(data) if text is not None else data,), system, at
