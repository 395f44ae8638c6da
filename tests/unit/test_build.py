"""embtrt build on the real MiniLM and on tiny models: ONNX parity, manifest, no half-written output."""

import json

import numpy as np
import pytest

from embtrt.export import build
from embtrt.common.corpus import load_corpus
from embtrt.repository.check import check_repository
from embtrt.errors import ParityError, SpecError
from embtrt.export.spec import spec_from_options


def test_default_build_passes_the_check_and_writes_the_manifest(minilm_repo, minilm_path):
    assert check_repository(minilm_repo).passed
    m = json.loads((minilm_repo / "embtrt.json").read_text())
    assert m["name"] == "all_minilm_l6_v2"
    assert (m["pooling"], m["normalize"], m["dim"], m["buckets"]) == ("mean", True, 384, [32, 128, 256])
    assert m["target"] == "python-ort" and m["precision"] == "fp32"
    assert len(m["source"]["sha256"]) == 64
    assert m["versions"]["onnxruntime"] and m["versions"]["torch"]
    assert m["parity"]["passed"] is True
    assert m["onnx"]["export_validation"]["cosine"]["p01"] >= 0.9999
    assert set(m["parity"]["buckets"]) == {"<=32", "<=128", "<=256", "over"}
    assert m["rebuild"].startswith("embtrt build ")
    assert m["identity"]["embtrt.backend_profile"].startswith("python-ort:cpu:fp32")


def test_onnx_matches_pytorch_for_every_tiny_model(tiny_repos):
    for key, repo in tiny_repos.items():
        m = json.loads((repo / "embtrt.json").read_text())
        assert m["onnx"]["export_validation"]["cosine"]["min"] >= 0.9999, key
        assert m["parity"]["overall"]["p01"] >= 0.9999, key
        assert check_repository(repo).passed, key
    bls = json.loads((tiny_repos["qwen3-last"] / "embtrt.json").read_text())
    assert "--router-encoder bls" in bls["rebuild"]
    assert not (tiny_repos["qwen3-last"] / "qwen3_last" / "1" / "model.onnx").exists()
    assert (tiny_repos["bert-cls"] / "bert_cls" / "1" / "model.onnx").is_file()  # local: the front door runs it
    pooler = json.loads((tiny_repos["xlmr-mean"] / "embtrt.json").read_text())
    assert pooler["pooler"] == "python" and pooler["encoder_output"] == "last_hidden_state"
    assert (tiny_repos["xlmr-mean"] / "xlmr_mean_32_pooler" / "config.pbtxt").is_file()


def test_int8_dynamic_quantization_fails_the_gate_and_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "int8"
    spec = spec_from_options(None, out, target="python-ort", precision="int8")
    with pytest.raises(ParityError) as ei:
        build(spec, log=print)
    assert "fail the quality gate" in ei.value.message and "cosine p50" in ei.value.message
    assert "--precision fp32" in ei.value.hint
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir()]  # no temporary folder left behind
    assert "[x] bucket" in capsys.readouterr().out


def test_build_refuses_to_overwrite_without_force(minilm_repo):
    spec = spec_from_options(None, minilm_repo, target="python-ort")
    with pytest.raises(SpecError, match="exists and is not empty"):
        build(spec, log=lambda m: None)


def test_corpus_loads_json_or_lines_and_rejects_garbage(tmp_path):
    assert len(load_corpus()) >= 300
    (tmp_path / "c.json").write_text(json.dumps(["a", "b"]))
    assert load_corpus(tmp_path / "c.json") == ["a", "b"]
    (tmp_path / "c.txt").write_text("one\n\ntwo\n")
    assert load_corpus(tmp_path / "c.txt") == ["one", "two"]
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(SpecError):
        load_corpus(tmp_path / "bad.json")


def test_wrong_pooling_is_caught_against_sentence_transformers(minilm_path, corpus):
    """Build-time parity checks the export; verify's reference is sentence-transformers itself."""
    from embtrt.reference.parity import cosine_rows
    from embtrt.reference.torch_ref import TorchReference, st_embed

    texts = corpus[:40]
    st = st_embed(minilm_path, texts)
    mean = TorchReference(minilm_path, "mean", True, 256, ("input_ids", "attention_mask", "token_type_ids")).embed(texts)
    cls = TorchReference(minilm_path, "cls", True, 256, ("input_ids", "attention_mask", "token_type_ids")).embed(texts)
    assert cosine_rows(st, mean).min() > 0.99999
    assert np.median(cosine_rows(st, cls)) < 0.99


def test_run_overhead_fit_recovers_a_linear_cost_model():
    from embtrt.export.chunking import overhead_from_timings

    fixed, per_token = 2e-3, 20e-6
    samples = [(r, n, fixed + per_token * r * n) for r, n in ((1, 16), (16, 16), (1, 32), (8, 32), (16, 32))]
    f, p, tokens = overhead_from_timings(samples)
    assert abs(f - fixed) < 1e-9 and abs(p - per_token) < 1e-12 and tokens == 100
    assert overhead_from_timings([(1, 16, 1.0), (16, 16, 0.5)])[2] == 4096  # nonsense timings: one chunk


def test_python_openvino_needs_openvino_and_bf16_on_the_cpu(monkeypatch):
    """The refusals a user sees where OpenVINO is missing or the CPU has no bf16 (neither can
    happen on this machine, so the import and the capability query are replaced)."""
    import sys
    import types

    from embtrt.export.encoders import require_openvino
    from embtrt.errors import DependencyError

    monkeypatch.setitem(sys.modules, "openvino", None)
    with pytest.raises(DependencyError, match="needs the openvino package") as ei:
        require_openvino("fp32", lambda m: None)
    assert "embtrt[openvino]" in ei.value.hint

    class Core:
        def get_property(self, device, name):
            return ["FP32", "INT8"]

    monkeypatch.setitem(sys.modules, "openvino", types.SimpleNamespace(Core=Core, __version__="2026.4.1-x"))
    with pytest.raises(DependencyError, match="no bf16 support") as ei:
        require_openvino("bf16", lambda m: None)
    assert "--precision fp32" in ei.value.hint
    require_openvino("fp32", lambda m: None)  # fp32 runs anywhere
