"""The multi-vector front door's core and heads without Triton: bge-m3's packed layout where the ColBERT
width differs from the hidden size (the tiny models' are equal), query expansion's attention, the
skiplist, and the options."""

from __future__ import annotations

import numpy as np
import pytest

from embtrt_backend import InputError
from embtrt_backend.core import CoreConfig
from embtrt_backend.kinds.multivector.core import MultiVectorConfig, MultiVectorCore, MultiVectorRequest, resolve
from embtrt_backend.kinds.multivector.score import m3_score, maxsim
from embtrt_backend.text import TextTokenizer


def _core(mv: MultiVectorConfig, prompts=None) -> MultiVectorCore:
    from embtrt.reference.modelinfo import default_model_path

    tok = TextTokenizer(str(default_model_path() / "tokenizer.json"), 64, 0)
    cfg = CoreConfig(buckets=(32, 64), max_batch=(8, 8), input_names=("input_ids", "attention_mask"), dim=mv.dim)
    return MultiVectorCore(cfg, mv, tok, prompts or {})


def test_the_m3_head_and_core_keep_dense_colbert_and_lexical_apart_when_widths_differ():
    import torch

    from embtrt_backend.torch_encoder import multivector_head

    torch.manual_seed(0)
    hidden, dim = 6, 4
    h = torch.randn(2, 5, hidden)
    heads = {"colbert_weight": torch.randn(dim, hidden), "colbert_bias": torch.randn(dim),
             "sparse_weight": torch.randn(1, hidden), "sparse_bias": torch.tensor([0.3])}
    out = multivector_head(torch, h, heads, "m3").numpy()
    assert out.shape == (2, 5, max(dim, hidden) + 1)
    F = torch.nn.functional
    dense = F.normalize(h[:, 0], dim=-1).numpy()
    col = F.normalize(F.linear(h, heads["colbert_weight"], heads["colbert_bias"]), dim=-1).numpy()
    sp = torch.relu(F.linear(h, heads["sparse_weight"], heads["sparse_bias"]))[..., 0].numpy()
    assert np.allclose(out[:, 0, :hidden], dense) and np.allclose(out[:, 1:, :dim], col[:, 1:])
    assert np.allclose(out[:, 1:, dim:hidden], 0) and np.allclose(out[..., hidden], sp)
    core = _core(MultiVectorConfig("m3", dim, hidden, 64, 64, drop_ids=frozenset({101, 102})))
    ids = [[101, 7592, 2088, 7592, 102]]
    res = core._m3([out[0]], type("R", (), {"ids": ids, "tokens": np.array([5])})())
    assert np.allclose(res.dense[0], dense[0]) and np.allclose(res.vectors[0], col[0, 1:])
    weights = sp[0]
    keep = {t: max(w for tt, w in zip(ids[0], weights, strict=True) if tt == t) for t in (7592, 2088) if max(
        w for tt, w in zip(ids[0], weights, strict=True) if tt == t) > 0}
    assert dict(zip(res.sparse[0][0].tolist(), res.sparse[0][1].tolist(), strict=True)) == pytest.approx(keep)


def test_expanded_queries_run_their_mask_positions_unattended_beside_documents():
    core = _core(MultiVectorConfig("colbert", 8, 0, 32, 48, expansion_id=103, skiplist=frozenset({1010})))
    reqs = [MultiVectorRequest(["hello, world"], resolve({"input_type": "query"}, {})),
            MultiVectorRequest(["hello, world"], resolve({}, {}))]
    batch = core.prepare(reqs)
    rows = [(c, core.feeds(c), j) for c in batch.chunks for j in range(len(c.ids))]
    (qc, qf, q), = [(c, f, j) for c, f, j in rows if len(c.ids[j]) == 32]
    assert qc.ids[q][5:] == [103] * 27 and qf["attention_mask"][q].tolist() == [1] * 5 + [0] * 27
    (dc, df, d), = [(c, f, j) for c, f, j in rows if len(c.ids[j]) == 5]
    assert df["attention_mask"][d].sum() == 5   # a document's tokens all attended
    outs = []
    for c in batch.chunks:
        f = core.feeds(c)
        width = f["input_ids"].shape[1]
        outs.append(core.after(np.arange(len(c.ids) * width * 8, dtype=np.float32).reshape(len(c.ids), width, 8), f, c))
    query, doc = batch.finish(outs)
    assert len(query.vectors[0]) == 32 and len(doc.vectors[0]) == 4   # the document's ',' (1010) skiplisted


def test_options_pick_the_side_and_its_prompt_and_refuse_what_is_unknown():
    prompts = {"query": "query: ", "passage": "passage: "}
    assert resolve({"input_type": "query"}, prompts).prompt == "query: "
    assert resolve({}, prompts).prompt == "passage: " and resolve({}, prompts).side == "document"
    assert resolve({"input_type": "corpus", "prompt_name": "query"}, prompts).prompt == "query: "
    for raw, param in (({"input_type": "x"}, "input_type"), ({"dimensions": 4}, "dimensions"),
                       ({"prompt_name": "nope"}, "prompt_name"), ({"truncate": "SIDEWAYS"}, "truncate")):
        with pytest.raises(InputError) as e:
            resolve(raw, prompts)
        assert e.value.param == param


def test_scores_follow_flagembedding_and_sentence_transformers():
    q, d = np.eye(3, 4, dtype=np.float32), np.array([[1, 0, 0, 0], [0, 0.5, 0.5, 0]], np.float32)
    assert maxsim(q, d) == pytest.approx(1 + 0.5 + 0.5) and maxsim(q, d, mean=True) == pytest.approx(2 / 3)
    assert maxsim(q, d[:0]) == -1e9   # no scoreable document vector: sentence-transformers' score
    a = {"dense": np.array([0.6, 0.8]), "lexical": (np.array([3, 7]), np.array([0.5, 0.2])), "colbert": q}
    b = {"dense": np.array([1.0, 0.0]), "lexical": (np.array([7, 9]), np.array([0.4, 1.0])), "colbert": d}
    assert m3_score("dense", a, b) == pytest.approx(0.6) and m3_score("sparse", a, b) == pytest.approx(0.08)
    assert m3_score("sparse+dense", a, b, (1, 3, 1)) == pytest.approx((0.6 + 3 * 0.08) / 4)
    assert m3_score("colbert+sparse+dense", a, b) == pytest.approx((0.6 + 0.08 + 2 / 3) / 3)
    # a mode reads only its parts: a side without token vectors scores sparse+dense
    assert m3_score("sparse+dense", {**a, "colbert": None}, {**b, "colbert": None}) == pytest.approx((0.6 + 0.08) / 2)
