"""Long encoders on ONNX Runtime serve its fused attention (export/fuse.py): a seeded tiny BERT's exported graph
fused into one Attention node per layer, equal to the export on a right-padded batch; the builds that keep the
export say why (short models, other targets and precisions, other model types, --no-fuse-attention, a fusion
that missed a layer)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

LAYERS, HEADS, HIDDEN = 2, 4, 32


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    import torch
    from transformers import BertConfig, BertModel

    d = tmp_path_factory.mktemp("bert")
    torch.manual_seed(3)
    cfg = BertConfig(vocab_size=200, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     intermediate_size=64, max_position_embeddings=8192, attn_implementation="eager")
    model = BertModel(cfg, add_pooling_layer=False).eval()
    model.config.save_pretrained(d)

    class Head(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state

    ids = torch.randint(5, 200, (2, 16))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(Head(model), (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(d / "model.onnx"),
                      input_names=names, output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={n: {0: "b", 1: "s"} for n in [*names, "last_hidden_state"]})
    return d


def _spec(d: Path, **kw):
    fields = {"fuse_attention": True, "precision": "fp32", "target": "python-ort", "device": "cpu",
              "max_seq_length": 8192, "model_dir": d, **kw}
    return SimpleNamespace(**fields)


def _run(path: Path, feed: dict) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def test_a_long_bert_is_served_fused_and_equal_to_its_export(exported, tmp_path):
    from embtrt.export.fuse import fuse_attention

    lines: list[str] = []
    path, record = fuse_attention(_spec(exported), exported / "model.onnx", tmp_path / "fused.onnx", lines.append)
    assert path == tmp_path / "fused.onnx" and record["fused"]["Attention"] == LAYERS, lines
    assert "2 Attention nodes" in lines[-1]
    import onnx

    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count("Attention") == LAYERS and "Softmax" not in ops   # no attention map left outside the fused op
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 200, (3, 300))
    mask = np.ones_like(ids)
    mask[1, 120:] = 0   # right padding, as the buckets pad
    mask[2, 7:] = 0
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    want, got = _run(exported / "model.onnx", feed), _run(path, feed)
    real = mask.astype(bool)
    assert np.abs(got[real] - want[real]).max() <= 1e-5
    assert np.abs(got[0] - got[1]).max() > 1e-2   # the rows are told apart: a collapsed graph would not pass


@pytest.mark.parametrize("change, why", [
    ({"max_seq_length": 512}, ""),   # short: fused or not runs alike, nothing said
    ({"fuse_attention": False}, ""),
    ({"target": "python-openvino"}, "attention not fused: target python-openvino"),
    ({"target": "onnxruntime", "device": "cuda"}, "attention not fused: target onnxruntime on cuda"),
    ({"precision": "int8"}, "attention not fused: precision int8"),
])
def test_builds_that_keep_the_export_say_why(exported, tmp_path, change, why):
    from embtrt.export.fuse import fuse_attention

    lines: list[str] = []
    src = exported / "model.onnx"
    assert fuse_attention(_spec(exported, **change), src, tmp_path / "f.onnx", lines.append) == (src, None)
    assert (lines == []) if not why else lines[0].startswith(why), lines
    assert not (tmp_path / "f.onnx").exists()


def test_another_model_type_and_a_missed_layer_keep_the_export(exported, tmp_path):
    from embtrt.export.fuse import fuse_attention

    src = exported / "model.onnx"
    for model_type, layers, said in (("qwen3", LAYERS, "model type 'qwen3'"), ("bert", LAYERS + 1, "fused 2 of 3 layers")):
        d = tmp_path / f"{model_type}{layers}"
        d.mkdir()
        cfg = json.loads((exported / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "model_type": model_type, "num_hidden_layers": layers}))
        lines: list[str] = []
        assert fuse_attention(_spec(d), src, d / "f.onnx", lines.append) == (src, None)
        assert said in lines[0], lines
