from pathlib import Path

import pytest

from embtrt.errors import SpecError
from embtrt.export.spec import BuildSpec, Gate, default_preferred
from embtrt.export.spec_options import sanitize_name, spec_from_options


def base(**kw) -> BuildSpec:
    args = dict(model_dir=Path("/m"), out=Path("/o"), name="m")
    args.update(kw)
    return BuildSpec(**args)


@pytest.mark.parametrize("field,value,allowed", [
    ("name", "../escape", "a letter"),
    ("name", "bad name", "a letter"),
    ("target", "vllm", "python-ort"),
    ("pooling", "max", "cls, mean, last-token"),
    ("precision", "fp4", "fp32"),
    ("pooler", "gpu", "fused, python"),
    ("overflow", "drop", "truncate, reject"),
    ("buckets", (128, 32, 256), "strictly increasing"),
    ("buckets", (32, 128), "largest bucket must equal"),
    ("max_batch_size", 0, "1 .. 4096"),
    ("preferred_batch_sizes", (8, 64), "max_batch_size"),
    ("instances", 0, "1 .. 64"),
])
def test_spec_error_names_the_field_and_allowed_values(field, value, allowed):
    with pytest.raises(SpecError) as ei:
        base(**{field: value})
    assert field in ei.value.message
    assert allowed in ei.value.hint


def test_precision_must_suit_the_target():
    with pytest.raises(SpecError) as ei:
        base(precision="fp16")  # python-ort runs fp32 or int8
    assert "precision" in ei.value.message and "python-ort" in ei.value.hint
    # TensorRT int8 / fp8 calibrate on the bundled corpus unless --calibration-file says otherwise
    assert base(target="tensorrt", precision="int8").calibration_file is None
    with pytest.raises(SpecError, match="calibration_file"):
        base(target="tensorrt", precision="int8", calibration_file=Path("/nonexistent/texts.txt"))
    assert base(target="tensorrt", precision="fp16").precision == "fp16"


def test_token_budget_gives_long_buckets_fewer_rows():
    s = base(buckets=(32, 128, 512, 2048, 8192), max_seq_length=8192, max_batch_size=32, max_batch_tokens=16384)
    assert [s.bucket_max_batch(b) for b in s.buckets] == [32, 32, 32, 8, 2]
    assert [s.bucket_preferred(b) for b in s.buckets] == [(8, 16, 32), (8, 16, 32), (8, 16, 32), (8,), (2,)]
    with pytest.raises(SpecError, match="max_batch_tokens"):
        base(max_batch_tokens=0)


def test_gate_rejects_out_of_range_thresholds():
    with pytest.raises(SpecError, match="cosine_p50"):
        Gate(cosine_p50=1.5)


def test_spec_is_frozen():
    s = base()
    with pytest.raises(AttributeError):
        s.name = "other"  # type: ignore[misc]


def test_default_preferred_sizes_end_at_max_batch():
    assert default_preferred(32) == (8, 16, 32)
    assert default_preferred(48) == (16, 32, 48)
    assert default_preferred(2) == (2,)


def test_sanitize_name_makes_safe_triton_names():
    assert sanitize_name("BAAI/bge-m3") == "baai_bge-m3"
    assert sanitize_name("../../etc") == "etc"
    assert sanitize_name("123") == "m_123"


def test_spec_from_bundled_model_reads_sentence_transformers_files():
    s = spec_from_options(None, Path("/tmp/x"), target="python-ort")
    assert (s.pooling, s.normalize, s.max_seq_length) == ("mean", True, 256)
    assert s.buckets == (32, 128, 256)
    assert s.name == "all_minilm_l6_v2"
    assert s.hidden_size == 384


def test_spec_options_override_the_model_files():
    s = spec_from_options(None, Path("/tmp/x"), target="python-ort", pooling="cls", normalize=False,
                          buckets="64,256")
    assert (s.pooling, s.normalize, s.buckets) == ("cls", False, (64, 256))


def test_max_seq_length_over_position_embeddings_is_refused():
    with pytest.raises(SpecError, match="max_seq_length"):
        spec_from_options(None, Path("/tmp/x"), target="python-ort", max_seq_length=1024)


def test_tiny_models_get_their_family_defaults(tiny_models):
    assert spec_from_options(tiny_models["bert-cls"], Path("/tmp/x")).pooling == "cls"
    assert spec_from_options(tiny_models["bert-cls"], Path("/tmp/x")).normalize is False
    x = spec_from_options(tiny_models["xlmr-mean"], Path("/tmp/x"))
    assert (x.pooling, x.normalize, x.input_names) == ("mean", True, ("input_ids", "attention_mask"))
    q = spec_from_options(tiny_models["qwen3-last"], Path("/tmp/x"))
    assert (q.pooling, q.is_decoder, q.max_seq_length) == ("last-token", True, 96)


def test_python_openvino_precisions_and_front_door_instances(tmp_path):
    from embtrt.export.spec import BuildSpec

    base = dict(model_dir=tmp_path, out=tmp_path / "o", name="m")
    assert BuildSpec(**base, target="python-openvino", precision="bf16").router_mode == "local"
    with pytest.raises(SpecError, match="precision"):
        BuildSpec(**base, target="python-openvino", precision="int8")
    with pytest.raises(SpecError, match="front_door_instances"):
        BuildSpec(**base, front_door_instances=0)
    with pytest.raises(SpecError, match="run_overhead_tokens"):
        BuildSpec(**base, run_overhead_tokens=-1)
    assert BuildSpec(**base).front_instances == 2
    assert BuildSpec(**base, instances=3).front_instances == 3
    assert BuildSpec(**base, front_door_instances=1).front_instances == 1
    assert BuildSpec(**base, target="onnxruntime").front_instances == 1


def test_the_device_is_cpu_or_cuda_for_the_targets_that_run_on_either_and_fp16_needs_cuda():
    assert base(target="python-torch", device="cuda", precision="fp16").gpu
    assert base(target="onnxruntime", device="cuda").gpu and base(target="tensorrt").gpu
    assert not base(target="python-torch").gpu
    with pytest.raises(SpecError, match="(?s)device.*'tpu'.*cpu, cuda"):
        base(target="python-torch", device="tpu")
    with pytest.raises(SpecError, match="cpu for target python-ort"):
        base(target="python-ort", device="cuda")
    with pytest.raises(SpecError, match=r"fp32, bf16 for target python-torch \(fp16: --device cuda\)"):
        base(target="python-torch", precision="fp16")
    with pytest.raises(SpecError, match="fp32, int8 for target python-ort"):
        base(target="python-ort", precision="fp16")


def test_ort_device_is_the_older_name_of_device_for_onnxruntime(minilm_path, tmp_path):
    spec = spec_from_options(minilm_path, tmp_path / "r", target="onnxruntime", ort_device="gpu")
    from embtrt.export.encoders import rebuild_command

    assert spec.device == "cuda" and "--device cuda" in rebuild_command(spec)
    assert spec_from_options(minilm_path, tmp_path / "r", target="onnxruntime", ort_device="cpu").device == "cpu"
    with pytest.raises(SpecError, match="ort_device.*'tpu'"):
        spec_from_options(minilm_path, tmp_path / "r", target="onnxruntime", ort_device="tpu")
    with pytest.raises(SpecError, match="the same device as --device cuda"):
        spec_from_options(minilm_path, tmp_path / "r", target="onnxruntime", ort_device="cpu", device="cuda")
