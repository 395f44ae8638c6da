"""Late chunking (#71): the chunks of one document embedded in one pass over the whole document, each chunk's
vector pooled from its own tokens, so that every chunk's tokens have seen the whole document (Jina's
`late_chunking: true`). Parts that exist: the token embeddings of one text (the token_vectors operation,
TEI's /embed_all: a `--pooler python` build), the model's tokenizer with its offsets, mean pooling and the
request's options (dimensions, vector types) as for any vector.

Two forms, one rule:

- consecutive chunks (OpenAI's /v1/embeddings and TEI's /embed with `late_chunking: true`): the inputs are
  joined with SEPARATOR, one space, into the document; chunk i covers its own characters there;
- explicit spans (`chunk_spans: [[start, end], ...]`, with one input, the document): character offsets
  (Python's: code points) of each chunk, in order, not overlapping; text between spans belongs to no chunk.

A token belongs to the chunk whose characters hold its last character (so a word piece that carries the
space before it, as byte-level BPE's do, goes with the word); special tokens ([CLS], [SEP], <s>) and tokens
outside every chunk belong to none but are part of the pass, as the document's context. Each chunk's
vector is the mean of its tokens' embeddings, L2-normalized where the model normalizes. Only mean pooling
is a pooling of token spans: a CLS or last-token model's vector is one position's, which no chunk owns
(refused, naming the pooling). The document must fit the model's max length in one pass (no truncation,
no macro-chunking: the first chunk that does not fit is named). No prompt is applied: the document is
embedded as it is (a prompt would be context no chunk owns; an explicit prompt_name / input_type is refused).

The gateway's side: the request's forms and their errors; the rule (join, owners, pool) is the front door's
(embtrt_backend.late_chunks), which does the same over gRPC.
"""

from __future__ import annotations

from dataclasses import dataclass

from embtrt_backend.late_chunks import SEPARATOR, document_tokens, join, pool, refusal, untruncated

from ..errors import ApiError

# the rule itself (join, owners, pool) is the front door's: embtrt_backend.late_chunks
__all__ = ["SEPARATOR", "Late", "check_spans", "document_tokens", "join", "parse", "pool", "refusal", "refuse_here",
           "untruncated"]


@dataclass(frozen=True)
class Late:
    """A late-chunking request: the document, each chunk's characters in it, and the field its chunks came in
    (named in errors: input / inputs for consecutive chunks, chunk_spans for explicit spans)."""

    document: str
    spans: tuple[tuple[int, int], ...]
    field: str


def parse(body: dict, texts: list[str] | None, field: str, raw: dict, max_items: int, media: tuple = ()) -> Late | None:
    """The body's late chunking (`late_chunking: true` with its inputs the chunks, or `chunk_spans` with one input,
    the document), None when it asks for none; a 400 where it cannot apply."""
    flag, spans = body.get("late_chunking"), body.get("chunk_spans")
    if flag is not None and not isinstance(flag, bool):
        raise ApiError(400, f"late_chunking must be true or false, not {str(flag)[:40]}", param="late_chunking")
    if spans is None and not flag:
        return None
    if flag is False:
        raise ApiError(400, "chunk_spans asks for late chunking, which late_chunking false turns off", param="late_chunking")
    if texts is None or media:
        raise ApiError(400, "late chunking embeds the chunks of one text document: send texts, not token ids or images",
                       param=field)
    for k in ("prompt_name", "input_type"):
        if raw.get(k) is not None:
            raise ApiError(400, "late chunking embeds the document as it is: a prompt (prompt_name / input_type) would "
                           "be context no chunk owns; send the request without it", param=k)
    if spans is None:
        document, found = join(texts)
        return Late(document, tuple(found), field)
    if len(texts) != 1:
        raise ApiError(400, f"with chunk_spans, {field} is the one document the spans cut ({len(texts)} given)", param=field)
    return Late(texts[0], tuple(check_spans(texts[0], spans, max_items=max_items)), "chunk_spans")


def refuse_here(body: object, route: str) -> None:
    """A 400 for late chunking asked of a route that does not serve it (never ignored: per-input vectors would
    be served as if it had been applied)."""
    if isinstance(body, dict):
        for k in ("late_chunking", "chunk_spans"):
            if body.get(k) not in (None, False):
                raise ApiError(400, f"{k}: late chunking is served on /v1/embeddings, /embeddings and /embed, not {route}",
                               param=k)


def check_spans(document: str, spans: object, field: str = "chunk_spans", max_items: int = 2048) -> list[tuple[int, int]]:
    """Explicit chunk spans, validated: a non-empty list of [start, end] integer pairs, each non-empty and
    inside the document, in order and not overlapping; else a 400 naming the first at fault."""
    if not isinstance(spans, list) or not spans:
        raise ApiError(400, f"{field} must be a non-empty list of [start, end] character offsets", param=field)
    if len(spans) > max_items:
        raise ApiError(400, f"{field} has {len(spans)} chunks; at most {max_items} per request", param=field)
    out: list[tuple[int, int]] = []
    for k, s in enumerate(spans):
        ok = isinstance(s, list) and len(s) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in s)
        if not ok:
            raise ApiError(400, f"{field}[{k}] must be [start, end], two integers, got {str(s)[:40]}", param=field)
        a, b = s
        if not 0 <= a < b <= len(document):
            raise ApiError(400, f"{field}[{k}] = [{a}, {b}] is not a non-empty span of the document's "
                           f"{len(document)} characters", param=field)
        if out and a < out[-1][1]:
            raise ApiError(400, f"{field}[{k}] starts at {a}, inside or before {field}[{k - 1}] (ends at {out[-1][1]}): "
                           "spans go in order and do not overlap", param=field)
        out.append((a, b))
    return out
