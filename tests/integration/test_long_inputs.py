"""Long inputs: --overflow chunk against the same computation by hand (the 16K-token model: test_16k.py)."""

from pathlib import Path

import numpy as np
import pytest

from conftest import start_server
from embtrt.export import build
from embtrt.serve.client import EmbeddingClient
from embtrt.errors import ClientError
from embtrt.reference.parity import cosine_rows
from embtrt.export.spec_options import spec_from_options
from parity_helpers import assert_discriminating

pytestmark = pytest.mark.integration


def by_hand_windows(model_dir: Path, texts: list[str], max_len: int, stride: int) -> np.ndarray:
    """Each text cut by the HF tokenizer into max-length windows (return_overflowing_tokens, stride),
    each window embedded by sentence-transformers' own modules, the mean taken and L2-normalized."""
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    st = SentenceTransformer(str(model_dir), device="cpu")
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    out = []
    with torch.inference_mode():
        for t in texts:
            enc = tok(t, truncation=True, max_length=max_len, stride=stride, return_overflowing_tokens=True)
            vecs = []
            for ids in enc["input_ids"]:
                feats = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
                vecs.append(st(feats)["sentence_embedding"][0].numpy())
            m = np.mean(vecs, axis=0)
            out.append(m / np.linalg.norm(m))
    return np.asarray(out, dtype=np.float32)


def test_chunk_mode_returns_the_mean_of_window_vectors_as_computed_by_hand(tiny_models, tmp_path, corpus):
    model = tiny_models["xlmr-mean"]  # mean pooling, normalized, max 128 tokens
    assert_discriminating(model, corpus[:32])
    repo = tmp_path / "chunk"
    build(spec_from_options(model, repo, name="x", overflow="chunk", overflow_stride=16), log=lambda m: None)
    longest = sorted(corpus, key=len)[-6:]
    long_texts = [" ".join(longest), longest[-1], longest[-2] + " " + longest[0]]  # 2 .. many windows each
    short = [t for t in corpus if len(t) < 150][:5]
    want_long = by_hand_windows(model, long_texts, 128, 16)
    from embtrt.reference.torch_ref import st_embed

    want_short = st_embed(model, short)
    mixed = [short[0], long_texts[0], short[1], long_texts[1], long_texts[2], *short[2:]]
    with start_server(repo, tmp_path) as srv:
        with EmbeddingClient(srv.grpc_url, "x") as c:
            got = c.embed(mixed)
            alone = c.embed(long_texts[:1])
        with EmbeddingClient(srv.grpc_url, "x_128") as c, pytest.raises(ClientError) as ei:
            c.embed(long_texts[:1])
    assert "built with --overflow chunk, which only the front-door model applies" in str(ei.value)
    got_long = got[[1, 3, 4]]
    got_short = got[[0, 2, 5, 6, 7]]
    assert cosine_rows(want_long, got_long).min() >= 0.9999
    assert cosine_rows(want_short, got_short).min() >= 0.9999  # short texts are embedded as usual
    assert cosine_rows(alone, got[[1]])[0] >= 0.99999           # the same text alone or beside others
    # and it is a real difference from truncation
    assert cosine_rows(st_embed(model, long_texts), got_long).min() < 0.9999
