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


def _batch(tok):
    """A tokenizer's batch encoding without character offsets (tokenizers >= 0.21: `encode_batch_fast`,
    the same ids and type ids, about 10% less work on short texts), else `encode_batch`."""
    return getattr(tok, "encode_batch_fast", tok.encode_batch)


@dataclass
class Encoded:
    ids: list[list[int]]
    type_ids: list[list[int]]
    lengths: np.ndarray  # int64 [B], tokens incl. special tokens, after truncation
    # --overflow chunk: one row per max-length window; owner[row] is the text it belongs to.
    # None: one row per text.
    owner: np.ndarray | None = None


class TextTokenizer:
    """A `tokenizers.Tokenizer` with the reference's truncation; padding is ours."""

    def __init__(self, tokenizer_json: str, max_length: int, pad_id: int, overflow: str = "truncate",
                 stride: int = 0) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(tokenizer_json)
        self.tok.no_padding()
        self.max_length = int(max_length)
        self.overflow = overflow
        # In reject mode keep one extra token so an over-long text is visible as such. In chunk
        # mode the tokenizer itself cuts max-length windows overlapping by `stride` tokens, each
        # with the model's special tokens (its post-processor), as HF's return_overflowing_tokens.
        limit = self.max_length + 1 if overflow == "reject" else self.max_length
        self.tok.enable_truncation(max_length=limit, stride=stride if overflow == "chunk" else 0)
        self.pad_id = int(pad_id)
        self._variants: dict[str, object] = {}

    def variant(self, truncate: str):
        """The tokenizer for a request's truncate option: END keeps the start, START keeps the end
        (truncation from the left, special tokens kept), NONE keeps one token more than the max so
        an over-long text is visible (and refused)."""
        if truncate not in self._variants:
            from tokenizers import Tokenizer

            t = Tokenizer.from_str(self.tok.to_str())
            t.no_padding()
            if truncate == "NONE":
                t.enable_truncation(max_length=self.max_length + 1)
            else:
                t.enable_truncation(max_length=self.max_length, direction="left" if truncate == "START" else "right")
            self._variants[truncate] = t
        return self._variants[truncate]

    def encode_mixed(self, texts: list[str], truncate: list[str | None]) -> Encoded:
        """Tokenize texts whose requests chose their own truncation (None: the build's --overflow).
        Rows come back in text order; chunk-mode texts may have several rows (Encoded.owner)."""
        modes = set(truncate)
        if modes == {None}:
            return self.encode(texts)
        groups: dict[str | None, list[int]] = {}
        for i, m in enumerate(truncate):
            groups.setdefault(m, []).append(i)
        per_text: list[list[tuple[list[int], list[int]]]] = [[] for _ in texts]
        for mode, idx in groups.items():
            sub = [texts[i] for i in idx]
            if mode is None:
                e = self.encode(sub)
                owner = e.owner if e.owner is not None else np.arange(len(sub))
                for r, o in enumerate(owner):
                    per_text[idx[int(o)]].append((e.ids[r], e.type_ids[r]))
            else:
                for i, enc in zip(idx, _batch(self.variant(mode))(sub, add_special_tokens=True), strict=True):
                    per_text[i].append((enc.ids, enc.type_ids))
        ids, types, owner_l = [], [], []
        for i, rows in enumerate(per_text):
            for a, b in rows:
                ids.append(a)
                types.append(b)
                owner_l.append(i)
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        owner = np.asarray(owner_l, dtype=np.int64) if len(ids) != len(texts) else None
        return Encoded(ids, types, lengths, owner)

    def encode(self, texts: list[str]) -> Encoded:
        """Tokenize all texts in one call. Over-long rows are kept (reject mode) for check(); in
        chunk mode a text longer than the max becomes several window rows (see Encoded.owner)."""
        if self.overflow != "chunk":   # no offsets needed: the batch call that skips them
            encs = _batch(self.tok)(texts, add_special_tokens=True)
        else:
            encs = self.tok.encode_batch(texts, add_special_tokens=True)
        if self.overflow == "chunk":
            rows, owner = [], []
            for i, e in enumerate(encs):
                for w in [e, *e.overflowing]:
                    rows.append(w)
                    owner.append(i)
            lengths = np.fromiter((len(w.ids) for w in rows), dtype=np.int64, count=len(rows))
            return Encoded([w.ids for w in rows], [w.type_ids for w in rows], lengths, np.asarray(owner, dtype=np.int64))
        lengths = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
        return Encoded([e.ids for e in encs], [e.type_ids for e in encs], lengths)

    def windows_per_text(self, enc: Encoded, n_texts: int) -> np.ndarray:
        """How many rows each text has (1 unless chunk mode cut it into windows)."""
        if enc.owner is None:
            return np.ones(n_texts, dtype=np.int64)
        return np.bincount(enc.owner, minlength=n_texts).astype(np.int64)

    def refuses_long(self, truncate: str | None) -> bool:
        """Whether an over-long text is refused instead of cut: the request's truncate NONE, or no
        truncate asked and the build used --overflow reject."""
        return (truncate or ("NONE" if self.overflow == "reject" else None)) == "NONE"

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


def merge_windows(vectors: np.ndarray, owner: np.ndarray | None, n_texts: int, normalize: bool) -> np.ndarray:
    """--overflow chunk: one vector per text, the mean of its window vectors, L2-normalized again
    when the model normalizes (an approximation of embedding the whole text, documented as such)."""
    if owner is None:
        return vectors
    sums = np.zeros((n_texts, vectors.shape[1]), dtype=np.float64)
    np.add.at(sums, owner, vectors.astype(np.float64))
    out = sums / np.bincount(owner, minlength=n_texts)[:, None]
    if normalize:
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out.astype(np.float32)
