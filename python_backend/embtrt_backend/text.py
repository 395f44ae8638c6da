"""Decode request text and tokenize it the way the reference (sentence-transformers) does."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import InputError


def decode_texts(arr: np.ndarray, max_bytes: int) -> list[str]:
    """TYPE_STRING tensor [B, 1] (or [B]) of bytes -> list of str.

    Rejects invalid UTF-8 and texts over max_bytes instead of guessing: a replaced
    character would silently change the vector.
    """
    flat = arr.reshape(-1)
    out: list[str] = []
    for i, item in enumerate(flat):
        if isinstance(item, str):
            b = item.encode("utf-8")
        elif isinstance(item, (bytes, np.bytes_)):
            b = bytes(item)
        else:
            raise InputError(f"row {i}: TEXT must be bytes (TYPE_STRING), got {type(item).__name__}")
        if len(b) > max_bytes:
            raise InputError(f"row {i}: text is {len(b)} bytes, over the limit of {max_bytes} bytes")
        try:
            out.append(b.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InputError(f"row {i}: TEXT is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    return out


@dataclass
class Encoded:
    ids: list[list[int]]
    type_ids: list[list[int]]
    lengths: np.ndarray  # int64 [B], tokens incl. special tokens, after truncation


class TextTokenizer:
    """A `tokenizers.Tokenizer` with the reference's truncation; padding is ours."""

    def __init__(self, tokenizer_json: str, max_length: int, pad_id: int, overflow: str = "truncate") -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(tokenizer_json)
        self.tok.no_padding()
        self.max_length = int(max_length)
        self.overflow = overflow
        # In reject mode keep one extra token so an over-long text is visible as such.
        limit = self.max_length + 1 if overflow == "reject" else self.max_length
        self.tok.enable_truncation(max_length=limit)
        self.pad_id = int(pad_id)

    def encode(self, texts: list[str]) -> Encoded:
        """Tokenize all texts in one call. Over-long rows are kept (reject mode) for check()."""
        encs = self.tok.encode_batch(texts, add_special_tokens=True)
        lengths = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
        return Encoded([e.ids for e in encs], [e.type_ids for e in encs], lengths)

    def check(self, lengths: np.ndarray, limit: int | None = None, where: str = "") -> None:
        """Raise InputError for the first row over the max length (reject mode) or over `limit`."""
        if self.overflow == "reject":
            over = np.nonzero(lengths > self.max_length)[0]
            if over.size:
                raise InputError(
                    f"row {int(over[0])}: text is longer than the max sequence length "
                    f"{self.max_length} tokens and this model was built with --overflow reject"
                )
        if limit is not None:
            over = np.nonzero(lengths > limit)[0]
            if over.size:
                raise InputError(
                    f"row {int(over[0])}: {int(lengths[over[0]])} tokens do not fit this {limit}-token "
                    f"bucket{where}; send it to the front-door model or a larger bucket"
                )

    def pad(self, enc: Encoded, rows: np.ndarray | list[int], length: int, names: tuple[str, ...]) -> dict[str, np.ndarray]:
        """Right-pad the given rows to `length`: the encoder inputs, by name."""
        n = len(rows)
        ids = np.full((n, length), self.pad_id, dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.int64)
        types = np.zeros((n, length), dtype=np.int64) if "token_type_ids" in names else None
        for j, r in enumerate(rows):
            seq = enc.ids[r]
            k = len(seq)
            ids[j, :k] = seq
            mask[j, :k] = 1
            if types is not None:
                types[j, :k] = enc.type_ids[r]
        out = {"input_ids": ids, "attention_mask": mask}
        if types is not None:
            out["token_type_ids"] = types
        return out
