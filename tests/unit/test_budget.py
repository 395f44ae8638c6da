"""The token budget in one place: the max batch it gives each bucket, the configs it rewrites for a
reload, the budgets tune tries, and embtrt.json's record of it. (Served end to end in
tests/integration/test_16k.py and test_tune.py.)"""

import dataclasses

import pytest

from embtrt.cli.measure import parse_slo
from embtrt.errors import EmbtrtError, SpecError
from embtrt.repository.budget import (bucket_batch, budget_models, budget_values, load_order, manifest_with_budget,
                                      with_budget)
from embtrt.repository.manifest import Manifest

DOC = {
    "schema_version": 2, "identity": {}, "name": "m",
    "models": {"front_door": "m", "ensembles": ["m_32", "m_512"], "encoders": ["m_32_encoder", "m_512_encoder"]},
    "pooling": "mean", "normalize": True, "dim": 8, "buckets": [32, 512], "max_seq_length": 512,
    "overflow": "truncate", "precision": "fp32", "target": "python-ort", "backend_profile": "python-ort:cpu:fp32",
    "pooler": "fused", "input_names": ["input_ids", "attention_mask"], "encoder_output": "embedding", "pad_id": 0,
    "max_batch_size": 32, "max_batch_tokens": 8192, "bucket_max_batch": {"32": 32, "512": 16},
    "server_python": "3.11", "spec": {"preferred_batch_sizes": [8, 16, 32], "max_batch_tokens": 8192},
}


def _configs() -> dict:
    def bucket(mb):
        return {"max_batch_size": mb, "dynamic_batching": {"preferred_batch_size": [p for p in (8, 16, 32) if p <= mb]},
                "model_warmup": [{"name": "w", "batch_size": 1}, {"name": "w", "batch_size": mb}]}

    return {"m": {"max_batch_size": 32, "parameters": {"encoder_max_batch_sizes": {"string_value": "32,16"}}},
            "m_32": {"max_batch_size": 32}, "m_32_encoder": bucket(32), "m_512": {"max_batch_size": 16},
            "m_512_encoder": bucket(16), "m_512_tokenizer": bucket(16)}


def test_the_budget_sets_every_bucket_models_batch_and_the_front_doors_chunking():
    m = Manifest.from_dict(DOC)
    assert bucket_batch(8192, 512, 32) == 16 and bucket_batch(100, 512, 32) == 1 and bucket_batch(1 << 20, 32, 32) == 32
    out = with_budget(m, _configs(), 1024)
    assert out["m_512"]["max_batch_size"] == 2 and out["m_512_encoder"]["max_batch_size"] == 2
    assert out["m_512_tokenizer"]["dynamic_batching"]["preferred_batch_size"] == [2]  # none of 8,16,32 fits: the max
    assert [w["batch_size"] for w in out["m_512_encoder"]["model_warmup"]] == [1, 2]
    assert out["m_32_encoder"]["max_batch_size"] == 32 and out["m_32"]["max_batch_size"] == 32
    assert out["m"]["parameters"]["encoder_max_batch_sizes"]["string_value"] == "32,2"
    assert out["m"]["parameters"]["max_batch_tokens"]["string_value"] == "1024"
    assert _configs()["m_512_encoder"]["max_batch_size"] == 16  # the input is not changed
    one = with_budget(m, _configs(), 512)  # one row of 512: warm-up batch 1 only, once
    assert [w["batch_size"] for w in one["m_512_encoder"]["model_warmup"]] == [1]


def test_reload_order_puts_ensembles_after_what_they_compose_and_the_front_door_last():
    m = Manifest.from_dict(DOC)
    order = load_order(m, ["m", "m_512", "m_512_encoder", "m_32", "m_32_encoder"])
    assert order.index("m_512") > order.index("m_512_encoder") and order[-1] == "m"
    assert budget_models(m, {"m", "m_32", "m_32_encoder"}) == ["m", "m_32", "m_32_encoder"]


def test_budgets_tried_start_with_the_built_one_and_each_gives_other_batches():
    m = Manifest.from_dict(DOC)
    values = budget_values(m)
    assert values[0] == 8192 and len(values) == len(set(values)) > 1
    batches = [tuple(bucket_batch(v, b, 32) for b in m.buckets) for v in values]
    assert len(set(batches)) == len(batches)


def test_tensorrt_repositories_are_refused_and_the_record_follows_the_budget():
    m = Manifest.from_dict(DOC)
    trt = dataclasses.replace(m, target="tensorrt")
    with pytest.raises(SpecError, match="engines fix the batch range") as err:
        with_budget(trt, _configs(), 1024)
    assert "--max-batch-tokens 1024" in err.value.hint
    rec = manifest_with_budget(m, 1024)
    assert rec.max_batch_tokens == 1024 and rec.bucket_max_batch == {32: 32, 512: 2}
    assert rec.spec["max_batch_tokens"] == 1024 and m.spec["max_batch_tokens"] == 8192


def test_slo_is_one_figure_or_one_per_bucket():
    assert parse_slo("120") == 120.0
    assert parse_slo("32=50,<=512=400") == {32: 50.0, 512: 400.0}
    with pytest.raises(EmbtrtError, match="invalid --slo-p99-ms"):
        parse_slo("32=fast")


def test_the_run_overhead_a_build_writes_is_the_front_doors_own_fallback():
    """One documented default: what builds write (BuildSpec's default) is what a front door
    plans with when its config has no run_overhead_tokens."""
    from embtrt_backend.core import CoreConfig
    from embtrt_backend.pairs import PairConfig
    from embtrt_backend.routing import RUN_OVERHEAD_TOKENS as FRONT_DOOR

    from embtrt.export.spec import BuildSpec
    from embtrt.repository.budget import RUN_OVERHEAD_TOKENS

    assert RUN_OVERHEAD_TOKENS == FRONT_DOOR == BuildSpec.__dataclass_fields__["run_overhead_tokens"].default
    params = {"buckets": "32", "encoder_max_batch_sizes": "8", "input_names": "input_ids", "embtrt.dim": "4",
              "pooler": "fused", "pooling": "mean", "normalize": "true", "pad_to_bucket": "false", "num_labels": "1"}
    assert CoreConfig.from_parameters(params).run_overhead == RUN_OVERHEAD_TOKENS
    assert PairConfig.from_parameters(params).run_overhead == RUN_OVERHEAD_TOKENS
    assert CoreConfig.from_parameters({**params, "run_overhead_tokens": "0"}).run_overhead == 0


@pytest.mark.parametrize("kind,target", [("embedder", "python-ort"), ("reranker", "python-openvino"),
                                         ("sparse", "onnxruntime"), ("embedder", "tensorrt")])
def test_tune_measures_the_run_overhead_for_every_kind_where_chunks_are_not_padded_to_the_bucket(kind, target, tmp_path):
    from embtrt.measure.knobs import RUN_OVERHEAD_VALUES, apply_setting, baseline, knobs_for
    from embtrt.repository.budget import RUN_OVERHEAD_TOKENS

    m = Manifest.from_dict({**DOC, "kind": kind, "target": target, "schema_version": 3})
    knobs = {k.name: k for k in knobs_for(m, tmp_path)}
    if target == "tensorrt":   # fixed-shape engines: every row padded to its bucket, nothing to weigh
        assert "front.run_overhead_tokens" not in knobs
        return
    knob = knobs["front.run_overhead_tokens"]
    assert knob.models == ("m",) and knob.values == RUN_OVERHEAD_VALUES and RUN_OVERHEAD_TOKENS in knob.values
    cfg = _configs()["m"]
    assert baseline([knob], m, {"m": cfg}) == {"front.run_overhead_tokens": RUN_OVERHEAD_TOKENS}  # absent: the fallback
    tuned = apply_setting(cfg, "front.run_overhead_tokens", 32)
    assert tuned["parameters"]["run_overhead_tokens"] == {"string_value": "32"}
    assert tuned["parameters"]["encoder_max_batch_sizes"] == cfg["parameters"]["encoder_max_batch_sizes"]
    assert baseline([knob], m, {"m": tuned}) == {"front.run_overhead_tokens": 32}


def test_a_budget_change_moves_python_torch_cuda_graphs_with_the_batches_and_the_run_overhead_knob_is_absent(tmp_path):
    """python-torch on CUDA captures a graph per bucket and batch size up to each bucket's max batch:
    a new budget rewrites those sizes with the batches (front door: every bucket; a bucket's encoder:
    its own), and there is no run overhead to tune where rows are padded to the bucket."""
    from embtrt.measure.knobs import BUDGET, knobs_for

    m = Manifest.from_dict({**DOC, "target": "python-torch", "schema_version": 3, "kind": "embedder",
                            "spec": {**DOC["spec"], "device": "cuda", "cuda_graphs": True}})
    cfgs = _configs()
    cfgs["m"]["parameters"]["graph_shapes"] = {"string_value": "32:1,2,4,8,16,32;512:1,2,4,8,16"}
    cfgs["m_512_encoder"]["parameters"] = {"graph_shapes": {"string_value": "512:1,2,4,8,16"}}
    out = with_budget(m, cfgs, 1024)
    assert out["m"]["parameters"]["graph_shapes"]["string_value"] == "32:1,2,4,8,16,32;512:1,2"
    assert out["m_512_encoder"]["parameters"]["graph_shapes"]["string_value"] == "512:1,2"
    assert "parameters" not in out["m_32_encoder"]   # a config without graphs gains none
    names = {k.name for k in knobs_for(m, tmp_path)}
    assert BUDGET in names and "front.run_overhead_tokens" not in names


def test_the_repository_check_catches_cuda_graphs_that_no_longer_match_the_budget(tmp_path):
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2 as mc

    from embtrt.repository.check import CheckReport, check_token_budget

    m = Manifest.from_dict({**DOC, "target": "python-torch", "schema_version": 3, "kind": "embedder"})
    cfgs = _configs()
    cfgs["m"]["parameters"]["graph_shapes"] = {"string_value": "32:1,2,4,8,16,32;512:1,2,4,8,16"}
    cfgs["m_512_encoder"]["parameters"] = {"graph_shapes": {"string_value": "512:1,2,4,8,16"}}

    def check(configs: dict) -> list[str]:
        rep = CheckReport()
        protos = {k: json_format.ParseDict(v, mc.ModelConfig(), ignore_unknown_fields=True) for k, v in configs.items()}
        check_token_budget(tmp_path, m, protos, rep)
        return rep.failures()

    assert check(cfgs) == []
    cfgs["m_512_encoder"]["parameters"]["graph_shapes"] = {"string_value": "512:1,2"}
    assert check(cfgs) == ["m_512_encoder: graph_shapes '512:1,2', the budget gives '512:1,2,4,8,16'"]
