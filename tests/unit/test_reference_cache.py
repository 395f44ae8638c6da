"""The reference cache (embtrt/reference/cache.py): an entry per (what, folder bytes, texts, options,
library versions); anything that changes the reference is a new entry, a broken entry is recomputed."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from embtrt.reference import cache


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path / "refs"))
    m = tmp_path / "model"
    (m / "1_Pooling").mkdir(parents=True)
    (m / "config.json").write_text('{"hidden_size": 4}')
    (m / "model.safetensors").write_bytes(b"\x00" * 64)
    (m / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    return m


class Counted:
    def __init__(self, rows: int) -> None:
        self.calls, self.rows = 0, rows

    def __call__(self) -> np.ndarray:
        self.calls += 1
        return np.random.default_rng(self.calls).standard_normal((self.rows, 4)).astype(np.float32)


def test_the_code_digest_covers_the_reference_modules():
    assert all((cache.Path(cache.__file__).parent / name).is_file() for name in cache._CODE)
    assert "torch_ref.py" in cache._CODE and len(cache._code_digest()) == 64


def test_a_second_call_is_read_back_bit_for_bit(folder, tmp_path):
    f = Counted(2)
    a = cache.cached("st", folder, ["a", "b"], {"x": 1}, f)
    b = cache.cached("st", folder, ["a", "b"], {"x": 1}, f)
    assert f.calls == 1 and a.dtype == b.dtype and np.array_equal(a, b)
    assert len(list((tmp_path / "refs").glob("*.npy"))) == 1
    assert not list((tmp_path / "refs").glob(".ref-*"))   # no temporary file left


@pytest.mark.parametrize("change", ["texts", "order", "options", "what", "weights", "nested file", "new file",
                                    "library version", "embtrt reference code"])
def test_whatever_the_reference_depends_on_makes_a_new_entry(folder, change, monkeypatch):
    f = Counted(2)
    args = ["st", folder, ["a", "b"], {"x": 1}]
    cache.cached(*args, f)
    if change == "texts":
        args[2] = ["a", "c"]
    elif change == "order":
        args[2] = ["b", "a"]
    elif change == "options":
        args[3] = {"x": 2}
    elif change == "what":
        args[0] = "torch"
    elif change == "weights":   # same size, one byte different, the same second
        (folder / "model.safetensors").write_bytes(b"\x00" * 63 + b"\x01")
    elif change == "nested file":
        (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    elif change == "new file":
        (folder / "2_Normalize").mkdir()
        (folder / "2_Normalize" / "marker").write_text("")
    elif change == "library version":
        real = cache._versions()
        monkeypatch.setattr(cache, "_versions", lambda: dict(real, torch="0.0.0"))
    else:   # as an embtrt whose pooling code differs: its digest over the reference modules moves
        monkeypatch.setattr(cache, "_code_digest", lambda: "another embtrt")
    cache.cached(*args, f)
    assert f.calls == 2, change


def test_the_same_bytes_in_another_folder_share_an_entry(folder, tmp_path):
    f = Counted(1)
    cache.cached("st", folder, ["a"], {}, f)
    shutil.copytree(folder, tmp_path / "copy")
    cache.cached("st", tmp_path / "copy", ["a"], {}, f)
    assert f.calls == 1


def test_a_broken_or_wrong_sized_entry_is_computed_again(folder, tmp_path):
    f = Counted(2)
    cache.cached("st", folder, ["a", "b"], {}, f)
    (entry,) = (tmp_path / "refs").glob("*.npy")
    entry.write_bytes(b"not numpy")
    again = cache.cached("st", folder, ["a", "b"], {}, f)
    assert f.calls == 2 and again.shape == (2, 4)
    np.save(entry, np.zeros((5, 4), np.float32))
    assert cache.cached("st", folder, ["a", "b"], {}, f).shape == (2, 4) and f.calls == 3


def test_off_computes_every_time_and_writes_nothing(folder, tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, "off")
    f = Counted(1)
    cache.cached("st", folder, ["a"], {}, f)
    cache.cached("st", folder, ["a"], {}, f)
    assert f.calls == 2 and not (tmp_path / "refs").exists()


def test_the_default_folder_is_under_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "embtrt" / "references"


def test_an_unwritable_cache_still_returns_the_computed_reference(folder, tmp_path, monkeypatch):
    if os.geteuid() == 0:   # root writes anywhere: a file where the folder should be
        (tmp_path / "blocked").write_text("")
        monkeypatch.setenv(cache.ENV, str(tmp_path / "blocked"))
    else:
        (tmp_path / "ro").mkdir(mode=0o500)
        monkeypatch.setenv(cache.ENV, str(tmp_path / "ro"))
    f = Counted(1)
    assert cache.cached("st", folder, ["a"], {}, f).shape == (1, 4) and f.calls == 1


def test_st_embed_and_the_torch_reference_are_cached_and_equal_a_fresh_computation(tiny_models, tmp_path,
                                                                                 monkeypatch):
    """A cached reference is what a cache-less computation gives, bit for bit; a cache hit loads no model."""
    from embtrt.reference import torch_ref

    monkeypatch.setenv(cache.ENV, str(tmp_path / "refs"))
    texts = ["a short text", "a somewhat longer text about tokens and vectors", "third"]
    folder = tiny_models["bert-cls"]
    first = torch_ref.st_embed(folder, texts)
    ref = torch_ref.TorchReference(folder, "cls", False, 64, ("input_ids", "attention_mask", "token_type_ids"))
    first_torch = ref.embed(texts)
    monkeypatch.setattr(torch_ref, "load_hf", lambda *a, **k: pytest.fail("a cache hit loaded the model"))
    import sentence_transformers

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer",
                        lambda *a, **k: pytest.fail("a cache hit loaded the model"))
    again = torch_ref.TorchReference(folder, "cls", False, 64, ("input_ids", "attention_mask", "token_type_ids"))
    assert np.array_equal(torch_ref.st_embed(folder, texts), first)
    assert np.array_equal(again.embed(texts), first_torch)
    monkeypatch.undo()
    monkeypatch.setenv(cache.ENV, "off")
    assert np.array_equal(torch_ref.st_embed(folder, texts), first)
    assert np.array_equal(torch_ref.TorchReference(folder, "cls", False, 64,
                                                   ("input_ids", "attention_mask", "token_type_ids")).embed(texts),
                          first_torch)
    assert len({r.tobytes() for r in first}) == 3   # the tiny model tells the texts apart


def test_inspect_model_is_read_back_without_transformers_and_still_refuses_untrusted_code(tiny_models, tmp_path,
                                                                                        monkeypatch):
    from embtrt.errors import ModelError
    from embtrt.reference import modelinfo

    monkeypatch.setenv(cache.ENV, str(tmp_path / "refs"))
    folder = tiny_models["qwen3-last"]
    first = modelinfo.inspect_model(folder)
    monkeypatch.setattr(modelinfo, "_inspect_model", lambda *a: pytest.fail("a cache hit inspected the folder"))
    assert modelinfo.inspect_model(folder) == first
    assert first.input_names == ("input_ids", "attention_mask") and first.is_decoder
    shutil.copytree(folder, tmp_path / "remote")
    (tmp_path / "remote" / "modeling_x.py").write_text("")
    cfg = (tmp_path / "remote" / "config.json")
    doc = json.loads(cfg.read_text())
    cfg.write_text(json.dumps(dict(doc, model_type="qwen3x", auto_map={"AutoModel": "modeling_x.X"})))
    with pytest.raises(ModelError, match="runs its own code"):
        modelinfo.inspect_model(tmp_path / "remote")


def test_a_sparse_entry_is_stored_by_its_non_zeros_and_read_back_exactly(folder, tmp_path):
    rng = np.random.default_rng(3)
    dense = np.where(rng.random((6, 30522)) < 0.01, rng.random((6, 30522)), 0).astype(np.float32)
    dense[4] = 0   # a text with no active dimension
    f = lambda: dense   # noqa: E731
    first = cache.cached("sparse", folder, list("abcdef"), {}, f, sparse=True)
    again = cache.cached("sparse", folder, list("abcdef"), {}, pytest.fail, sparse=True)
    (entry,) = (tmp_path / "refs").glob("*.npz")
    assert entry.stat().st_size < dense.nbytes / 20
    assert np.array_equal(first, dense) and np.array_equal(again, dense) and again.dtype == np.float32
    entry.write_bytes(b"PK not a zip")
    assert np.array_equal(cache.cached("sparse", folder, list("abcdef"), {}, f, sparse=True), dense)


def test_the_sparse_reference_is_cached_per_side_and_top_k(tmp_path, monkeypatch):
    """SparseEncoder.encode_document / encode_query through the cache equal them computed afresh, and a
    changed default top-k (max_active_dims) is a new entry."""
    import tiny_models

    from embtrt.kinds.sparse.reference import _se_encode, load_sparse_encoder, se_encode

    monkeypatch.setenv(cache.ENV, str(tmp_path / "refs"))
    folder = tiny_models.make_bert_splade(tmp_path / "splade")
    se = load_sparse_encoder(folder)
    texts = ["a short text", "another text about sparse vectors", "query: third one"]
    for which in ("document", "query"):
        assert np.array_equal(se_encode(se, texts, which), _se_encode(se, texts, which, None))
        assert np.array_equal(se_encode(se, texts, which), _se_encode(se, texts, which, None))
    assert len(list((tmp_path / "refs").glob("*.npz"))) == 2
    se.max_active_dims = 2
    top2 = se_encode(se, texts, "document")
    assert (top2 > 0).sum(axis=1).max() <= 2 and len(list((tmp_path / "refs").glob("*.npz"))) == 3
