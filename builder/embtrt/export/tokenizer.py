"""The serving tokenizer: tokenizer.json from the model's fast tokenizer, proven to give the
reference tokenizer's ids on real text."""

from __future__ import annotations

from pathlib import Path

from ..common.backend import backend_lib
from ..common.log import Log
from ..errors import ParityError
from .spec import BuildSpec


def save_tokenizer(spec: BuildSpec, dest: Path) -> int:
    """Write the fast tokenizer's tokenizer.json; return the pad id the serving side uses."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(spec.model_dir), trust_remote_code=spec.trust_remote_code)
    tok.backend_tokenizer.save(str(dest))
    pad = tok.pad_token_id
    if pad is None:
        pad = tok.eos_token_id if tok.eos_token_id is not None else 0
    return int(pad)


def check_tokenizer(spec: BuildSpec, tokenizer_json: Path, pad_id: int, texts: list[str], log: Log) -> None:
    """Serving tokenizer (tokenizers + our truncation) must give the reference's ids."""
    from transformers import AutoTokenizer

    text_mod, _ = backend_lib()
    ours = text_mod.TextTokenizer(str(tokenizer_json), spec.max_seq_length, pad_id, "truncate")
    ref = AutoTokenizer.from_pretrained(str(spec.model_dir), trust_remote_code=spec.trust_remote_code)
    enc = ours.encode(texts)
    want = ref(texts, truncation=True, max_length=spec.max_seq_length)["input_ids"]
    bad = [i for i, (a, b) in enumerate(zip(enc.ids, want)) if list(a) != list(b)]
    if bad:
        raise ParityError(f"the serving tokenizer differs from the reference on {len(bad)} of {len(texts)} texts "
                          f"(first: {texts[bad[0]][:60]!r})", "the tokenizer.json lacks settings of the HF tokenizer")
    log(f"[ok] serving tokenizer equals the reference tokenizer on {len(texts)} texts")
