"""embtrt build on the real MiniLM and on tiny models: ONNX parity, manifest, no half-written output."""

import json

import pytest

from embtrt.export import build
from embtrt.common.corpus import load_corpus
from embtrt.repository.check import check_repository
from embtrt.errors import ParityError, SpecError
from embtrt.export.spec_options import spec_from_options
from parity_helpers import (_st_pooling, assert_discriminating, assert_rows_equal, onnx_file_vectors,
                            repository_onnx_files)


def _sample(corpus):
    """Texts of every length the corpus has, over-long ones included (truncated at the max length)."""
    return sorted(corpus, key=len)[::4]


def _reference(folder, texts):
    """SentenceTransformer.encode for sentence-transformers folders; the PyTorch reference with the
    folder's own pooling for the Qwen3 model (a bare transformers folder)."""
    from embtrt.reference.torch_ref import TorchReference, st_embed

    if (folder / "modules.json").exists():
        return st_embed(folder, texts)
    spec = spec_from_options(folder, folder / "unused")
    return TorchReference(spec.model_dir, spec.pooling, spec.normalize, spec.max_seq_length,
                          spec.input_names).embed(texts)


def _onnx_parity(repo, folder, texts, pooling, max_length):
    """Every ONNX file of a repository, run by ONNX Runtime on its own, equals the reference row by
    row (files that are copies of one export are run once)."""
    from embtrt.common.files import sha256_file

    ref = _reference(folder, texts)
    seen = set()
    for name, path in repository_onnx_files(repo).items():
        sha = sha256_file(path)
        if sha in seen:
            continue
        seen.add(sha)
        got = onnx_file_vectors(path, folder, texts, pooling, max_length)
        assert_rows_equal(ref, got, what=f"{repo.name}/{name}/1/model.onnx")
    assert seen, f"no model.onnx in {repo}"


def test_default_build_passes_the_check_and_writes_the_manifest(minilm_repo, minilm_path):
    assert check_repository(minilm_repo).passed
    m = json.loads((minilm_repo / "embtrt.json").read_text())
    assert m["name"] == "all_minilm_l6_v2"
    assert (m["pooling"], m["normalize"], m["dim"], m["buckets"]) == ("mean", True, 384, [32, 128, 256])
    assert m["target"] == "python-ort" and m["precision"] == "fp32"
    assert len(m["source"]["sha256"]) == 64
    assert m["versions"]["onnxruntime"] and m["versions"]["torch"]
    assert m["parity"]["passed"] is True
    assert m["onnx"]["export_validation"]["ok"] is True            # what the build recorded ...
    _onnx_parity(minilm_repo, minilm_path, _sample(load_corpus()), "mean", 256)   # ... and what holds
    assert set(m["parity"]["buckets"]) == {"<=32", "<=128", "<=256", "over"}
    assert m["rebuild"].startswith("embtrt build ")
    assert m["identity"]["embtrt.backend_profile"].startswith("python-ort:cpu:fp32")


def test_onnx_matches_pytorch_for_every_tiny_model(tiny_models, tiny_repos, corpus):
    """ONNX Runtime on each repository's model.onnx files against the reference, recomputed here (the
    figures the build wrote into its manifest are not evidence of themselves)."""
    texts = _sample(corpus)
    for key, repo in tiny_repos.items():
        folder = tiny_models[key]
        assert_apart_or_st(folder, texts)
        m = json.loads((repo / "embtrt.json").read_text())
        assert m["parity"]["passed"] is True, key
        pooling = _st_pooling(folder)[0] if (folder / "modules.json").exists() else "lasttoken"
        _onnx_parity(repo, folder, texts, pooling, m["max_seq_length"])
        assert check_repository(repo).passed, key
    bls = json.loads((tiny_repos["qwen3-last"] / "embtrt.json").read_text())
    assert "--router-encoder bls" in bls["rebuild"]
    assert not (tiny_repos["qwen3-last"] / "qwen3_last" / "1" / "model.onnx").exists()
    assert (tiny_repos["bert-cls"] / "bert_cls" / "1" / "model.onnx").is_file()  # local: the front door runs it
    pooler = json.loads((tiny_repos["xlmr-mean"] / "embtrt.json").read_text())
    assert pooler["pooler"] == "python" and pooler["encoder_output"] == "last_hidden_state"
    assert (tiny_repos["xlmr-mean"] / "xlmr_mean_32_pooler" / "config.pbtxt").is_file()


@pytest.mark.slow   # the kinds' int8 refusal (test_kind_targets) checks the same leave-nothing path by default
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


def assert_apart_or_st(folder, texts):
    """The tiny model tells texts apart (its reference vectors of different texts are well apart)."""
    from parity_helpers import assert_apart

    if (folder / "modules.json").exists():
        assert_discriminating(folder, texts[:64])
    else:
        assert_apart(_reference(folder, texts[:64]), folder.name)


def test_wrong_pooling_fails_embtrts_own_gate(tiny_models, tiny_repos, corpus):
    """The build's gate (reference.parity.evaluate on the served path's vectors, export.served) passes
    the XLM-R repository as built (mean pooling) and fails the same encoders pooled by CLS or by last
    token, naming the cosine."""
    from embtrt.kinds.embedder.export import reference_vectors
    from embtrt.export.served import encoder_vectors
    from embtrt.reference.parity import evaluate

    folder, repo = tiny_models["xlmr-mean"], tiny_repos["xlmr-mean"]
    assert_discriminating(folder, corpus[:64])
    man = json.loads((repo / "embtrt.json").read_text())
    spec = spec_from_options(folder, repo, name="xlmr_mean", pooler="python")
    assert spec.pooling == "mean" and not spec.fused
    texts = corpus[:120]
    ref = reference_vectors(spec, texts, log=lambda m: None)
    onnx = {b: repo / f"xlmr_mean_{b}_encoder" / "1" / "model.onnx" for b in spec.buckets}
    tok = repo / "xlmr_mean" / "1" / "tokenizer.json"
    good, labels = encoder_vectors(spec, onnx, tok, man["pad_id"], man["encoder_output"], texts)
    report = evaluate(ref, good, labels, spec.gate, texts)
    assert report.passed, report.failures
    for wrong in ("cls", "last-token"):
        bad, labels = encoder_vectors(spec.with_(pooling=wrong), onnx, tok, man["pad_id"], man["encoder_output"], texts)
        report = evaluate(ref, bad, labels, spec.gate, texts)
        assert not report.passed and any("cosine p50" in f for f in report.failures), (wrong, report.failures)


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
