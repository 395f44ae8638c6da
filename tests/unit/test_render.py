"""Every template renders and parses with Triton's model_config.proto; the check catches corruption."""

import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from embtrt.repository.check import check_repository
from embtrt.export.render import plan_repository, render_config, write_repository
from embtrt.export.spec import BuildSpec

IDENTITY = {"embtrt.model": "m", "embtrt.pooling": "mean", "embtrt.dim": "16"}


def _spec(**kw) -> BuildSpec:
    args = dict(model_dir=Path("/m"), out=Path("/o"), name="emb", buckets=(16, 64), max_seq_length=64,
                hidden_size=16, input_names=("input_ids", "attention_mask", "token_type_ids"),
                max_batch_size=8, preferred_batch_sizes=(4, 8))
    args.update(kw)
    return BuildSpec(**args)


def _repo(tmp_path: Path, spec: BuildSpec, with_plans: bool = False) -> Path:
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"onnx")
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    plans = {}
    if with_plans:
        for b in spec.buckets:
            plans[b] = tmp_path / f"p{b}.plan"
            plans[b].write_bytes(b"plan")
    out = plan_repository(spec, onnx_paths={b: onnx for b in spec.buckets},
                          encoder_output="embedding" if spec.fused else "last_hidden_state",
                          tokenizer_json=tok, pad_id=0, identity=IDENTITY, plan_paths=plans)
    repo = tmp_path / "repo"
    write_repository(out, repo)
    return repo


VARIANTS = [
    dict(target="python-ort"),
    dict(target="python-openvino", precision="bf16"),
    dict(target="python-ort", pooler="python"),
    dict(target="python-ort", overflow="reject", max_queue_size=0, queue_timeout_us=0),
    dict(target="onnxruntime"),
    dict(target="onnxruntime", device="cuda", ort_trt_fp16=True, precision="fp16"),
    dict(target="tensorrt", precision="fp16"),
    dict(target="tensorrt", pooler="python"),
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}={v[k]}" for k in v))
def test_every_rendered_config_parses_with_the_triton_proto(tmp_path, variant):
    spec = _spec(**variant)
    repo = _repo(tmp_path, spec, with_plans=spec.target == "tensorrt")
    names = sorted(p.name for p in repo.iterdir())
    expected = {"emb", "emb_16", "emb_64", "emb_16_tokenizer", "emb_64_tokenizer", "emb_16_encoder", "emb_64_encoder"}
    if not spec.fused:
        expected |= {"emb_16_pooler", "emb_64_pooler"}
    assert set(names) == expected
    for d in repo.iterdir():
        cfg = text_format.Parse((d / "config.pbtxt").read_text(), mc.ModelConfig())
        assert cfg.name == d.name
        assert cfg.max_batch_size == 8
        assert cfg.parameters["embtrt.model"].string_value == "m"
        if cfg.platform != "ensemble":
            db = cfg.dynamic_batching
            assert cfg.HasField("dynamic_batching") and db.max_queue_delay_microseconds == spec.max_queue_delay_us == 0
            # The front door runs the encoder itself for python-* targets, and the bucket encoders of
            # python-* targets take token ids from the gateway: two instances each (auto).
            front_local = d.name == "emb" and spec.router_mode == "local"
            py_encoder = d.name.endswith("_encoder") and spec.target in ("python-ort", "python-openvino", "python-torch")
            assert cfg.instance_group[0].count == (2 if front_local or py_encoder else 1)
            if spec.max_queue_size:
                assert db.default_queue_policy.max_queue_size == 256
    rep = check_repository(repo)
    assert rep.passed, rep.failures()


def test_front_door_instances_auto_and_override(tmp_path):
    def count(spec, name="emb"):
        where = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        where.mkdir()
        repo = _repo(where, spec)
        return text_format.Parse((repo / name / "config.pbtxt").read_text(), mc.ModelConfig()).instance_group[0].count

    assert count(_spec(target="python-ort")) == 2
    assert count(_spec(target="python-ort", router_encoder="bls")) == 1
    assert count(_spec(target="onnxruntime")) == 1
    assert count(_spec(target="python-ort", front_door_instances=1)) == 1
    assert count(_spec(target="python-ort", front_door_instances=3)) == 3
    assert count(_spec(target="python-ort", front_door_instances=3), "emb_16_encoder") == 2   # encoder auto
    assert count(_spec(target="python-ort", encoder_instances=1), "emb_16_encoder") == 1
    assert count(_spec(target="onnxruntime"), "emb_16_encoder") == 1
    assert count(_spec(target="python-ort"), "emb_16_tokenizer") == 1


def test_front_door_contract(tmp_path):
    repo = _repo(tmp_path, _spec())
    cfg = text_format.Parse((repo / "emb" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert (cfg.input[0].name, cfg.input[0].data_type, list(cfg.input[0].dims)) == ("TEXT", mc.TYPE_STRING, [1])
    # a width (dimensions) and a vector type per request: float, int8 (int8, binary), uint8 (uint8, ubinary);
    # and each text's token count (usage)
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == [
        ("EMBEDDING", mc.TYPE_FP32, [-1]), ("EMBEDDING_INT8", mc.TYPE_INT8, [-1]), ("EMBEDDING_UINT8", mc.TYPE_UINT8, [-1]),
        ("TOKENS", mc.TYPE_INT64, [1])]
    assert cfg.backend == "python" and cfg.max_batch_size > 0
    assert cfg.parameters["encoder_models"].string_value == "emb_16_encoder,emb_64_encoder"
    assert (repo / "emb" / "1" / "model.py").is_file()
    assert (repo / "emb" / "1" / "embtrt_backend" / "routing.py").is_file()


def test_a_local_front_door_warms_up_each_instance_with_a_real_text_and_a_bls_one_does_not(tmp_path):
    (tmp_path / "local").mkdir()
    (tmp_path / "bls").mkdir()
    repo = _repo(tmp_path / "local", _spec())
    cfg = text_format.Parse((repo / "emb" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert [(w.name, w.batch_size) for w in cfg.model_warmup] == [("sample_text", 1)]
    (inp,) = cfg.model_warmup[0].inputs.items()
    assert inp[0] == "TEXT" and inp[1].data_type == mc.TYPE_STRING and inp[1].input_data_file == "sample_text"
    # Triton's layout of one TYPE_STRING element: a 4-byte little-endian length, then the bytes
    raw = (repo / "emb" / "warmup" / "sample_text").read_bytes()
    assert int.from_bytes(raw[:4], "little") == len(raw) - 4 and raw[4:].decode() == "warm up"
    assert check_repository(repo).passed
    (repo / "emb" / "warmup" / "sample_text").unlink()   # Triton would refuse to load the model
    assert "emb: missing warm-up data warmup/sample_text" in check_repository(repo).failures()
    bls = _repo(tmp_path / "bls", _spec(router_encoder="bls"))   # its encoders may still be loading
    cfg = text_format.Parse((bls / "emb" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert not cfg.model_warmup and not (bls / "emb" / "warmup").exists()


def test_encoders_warm_up_at_their_bucket_length(tmp_path):
    """python-ort on the CPU warms each bucket encoder at batch 1 (a max-batch warm-up bought its
    first max-batch request nothing measurable and cost 3.5 CPU-s per MiniLM instance at load);
    OpenVINO, PyTorch and the onnxruntime backend (CPU or CUDA) keep batch 1 and the max batch."""
    for target, extra, want in (("python-ort", {}, [1]), ("python-openvino", {}, [1, 8]),
                                ("onnxruntime", {}, [1, 8]), ("onnxruntime", {"device": "cuda"}, [1, 8])):
        out = tmp_path / f"{target}-{extra.get('device', 'cpu')}"
        out.mkdir()
        repo = _repo(out, _spec(target=target, **extra))
        cfg = text_format.Parse((repo / "emb_64_encoder" / "config.pbtxt").read_text(), mc.ModelConfig())
        assert [w.batch_size for w in cfg.model_warmup] == want, (target, extra)
        assert all(list(i.dims) == [64] and i.zero_data for w in cfg.model_warmup for i in w.inputs.values())


def test_tensorrt_encoder_has_graphs_profiles_and_warmup_per_batch_size(tmp_path):
    spec = _spec(target="tensorrt", precision="fp16")
    repo = _repo(tmp_path, spec, with_plans=True)
    cfg = text_format.Parse((repo / "emb_16_encoder" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert cfg.platform == "tensorrt_plan"
    assert cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert list(cfg.instance_group[0].profile) == ["0"]
    assert cfg.optimization.cuda.graphs
    sizes = [g.batch_size for g in cfg.optimization.cuda.graph_spec]
    assert sizes == [1, 4, 8]
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    for g in cfg.optimization.cuda.graph_spec:
        assert {k: list(v.dim) for k, v in g.input.items()} == {n: [16] for n in spec.input_names}
    assert [w.batch_size for w in cfg.model_warmup] == sizes
    assert all(list(t.dims) == [16] for t in cfg.input)


def test_template_with_a_missing_value_fails_loudly(tmp_path):
    from embtrt.errors import RepositoryError
    from embtrt.export.render import ModelPlan

    with pytest.raises(RepositoryError, match="undefined"):
        render_config(ModelPlan("x", "router.pbtxt.j2", {"name": "x"}))


def _corrupt(repo: Path, model: str, old: str, new: str) -> None:
    p = repo / model / "config.pbtxt"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("model,old,new,needle", [
    ("emb_16", 'value: "attention_mask"', 'value: "attn_mask"', "produced by no earlier step"),
    ("emb_16", 'model_name: "emb_16_encoder"', 'model_name: "emb_99_encoder"', "not in the repository"),
    ("emb_16", 'key: "embedding"', 'key: "pooled"', "not an output of"),
    ("emb_16_tokenizer", "TYPE_INT64", "TYPE_INT32", "wants TYPE_INT64"),
    ("emb_16", 'data_type: TYPE_FP32', 'data_type: TYPE_FP16', "config says TYPE_FP16"),
    ("emb_64_encoder", "max_batch_size: 8", "max_batch_size: 2", "preferred_batch_size"),
    ("emb", 'name: "emb"', 'name: "other"', "differs from its folder"),
])
def test_check_catches_a_corrupted_repository(tmp_path, model, old, new, needle):
    repo = _repo(tmp_path, _spec())
    assert check_repository(repo).passed
    _corrupt(repo, model, old, new)
    rep = check_repository(repo)
    assert not rep.passed
    assert any(needle in f for f in rep.failures()), rep.failures()


def test_check_catches_unparseable_config_and_missing_files(tmp_path):
    repo = _repo(tmp_path, _spec())
    (repo / "emb_16_encoder" / "1" / "model.onnx").unlink()
    (repo / "emb_64" / "config.pbtxt").write_text("name: \"emb_64\" platform: ensemble bogus_field: 1")
    fails = check_repository(repo).failures()
    assert any("missing 1/model.onnx" in f for f in fails)
    assert any("not a valid Triton model config" in f for f in fails)
    shutil.rmtree(repo / "emb_16_encoder")
    assert any("not in the repository" in f for f in check_repository(repo).failures())


@pytest.mark.parametrize("overhead", [None, 0, 40])
def test_every_kinds_front_door_writes_the_run_overhead_given_and_the_default_without_one(overhead, tmp_path):
    """The run overhead is the spec's, never a timing: the documented default when none is given, and
    an explicit value as given for every kind (0 too: the reranker and sparse builds once turned it
    into 32 through `or`)."""
    from embtrt.kinds.reranker import export as rerank
    from embtrt.kinds.sparse import export as sparse
    from embtrt.repository.budget import RUN_OVERHEAD_TOKENS

    spec = _spec() if overhead is None else _spec(run_overhead_tokens=overhead)
    want = str(RUN_OVERHEAD_TOKENS if overhead is None else overhead)
    assert rerank.RerankerBuild(spec, print).params(0)["run_overhead_tokens"] == want
    assert sparse.SparseBuild(spec, print).params(0)["run_overhead_tokens"] == want
    front = text_format.Parse((_repo(tmp_path, spec) / "emb" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert front.parameters["run_overhead_tokens"].string_value == want


@pytest.mark.parametrize("router", ["local", "bls"])
def test_python_torch_on_cuda_renders_gpu_instances_static_shapes_and_rows_padded_to_the_bucket(router, tmp_path):
    """--device cuda: the models that run PyTorch take KIND_GPU instances and the CUDA graphs they
    capture at load (every bucket for the front door that runs them all, its own bucket for a bucket
    encoder); the front door pads rows to the bucket (no run overhead to weigh) and the configs
    pass the repository check."""
    model = tmp_path / "hf"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec = _spec(target="python-torch", device="cuda", precision="fp16", model_dir=model, router_encoder=router,
                 max_batch_tokens=256)
    assert spec.pad_to_bucket and spec.graph_shapes() == {16: (1, 2, 4, 8), 64: (1, 2, 4)}
    repo = _repo(tmp_path, spec)
    cfgs = {d.name: text_format.Parse((d / "config.pbtxt").read_text(), mc.ModelConfig())
            for d in repo.iterdir() if (d / "config.pbtxt").is_file()}
    front = cfgs["emb"]
    assert front.parameters["pad_to_bucket"].string_value == "true"
    gpu = {n for n, c in cfgs.items() if c.instance_group and c.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU}
    encoders = {"emb_16_encoder", "emb_64_encoder"}   # the ensembles' bucket encoders run PyTorch on the GPU too
    assert gpu == (encoders | {"emb"} if router == "local" else encoders)
    assert front.parameters["device"].string_value == "cuda" and front.parameters["cuda_graphs"].string_value == "true"
    assert front.parameters["graph_shapes"].string_value == "16:1,2,4,8;64:1,2,4"
    assert cfgs["emb_16_encoder"].parameters["graph_shapes"].string_value == "16:1,2,4,8"
    assert cfgs["emb_64_encoder"].parameters["graph_shapes"].string_value == "64:1,2,4"
    rep = check_repository(repo)
    assert rep.passed, rep.failures()
    eager = _spec(target="python-torch", device="cuda", model_dir=model, cuda_graphs=False)
    assert not eager.pad_to_bucket and eager.graph_shapes() == {}
    assert not _spec(target="python-torch", model_dir=model).pad_to_bucket   # the CPU: chunks weigh padding
