"""embtrt.json: one typed reader and writer; schema 1 is read, a newer schema is refused."""

import json

import pytest

from embtrt.errors import RepositoryError
from embtrt.repository.manifest import SCHEMA_VERSION, Manifest, read_manifest, write_manifest

V1 = {  # what embtrt wrote before schema_version existed (trimmed to the fields readers use)
    "embtrt_manifest": 1, "identity": {"embtrt.model": "m", "embtrt.dim": "8"}, "name": "m",
    "models": {"front_door": "m", "ensembles": ["m_16"], "encoders": ["m_16_encoder"]},
    "pooling": "mean", "normalize": True, "dim": 8, "buckets": [16], "max_seq_length": 16, "overflow": "truncate",
    "precision": "fp32", "target": "python-ort", "backend_profile": "python-ort:cpu:fp32", "pooler": "fused",
    "input_names": ["input_ids", "attention_mask"], "encoder_output": "embedding", "pad_id": 0,
    "spec": {"max_batch_size": 32, "overflow_stride": 4, "gate": {"cosine_p50": 0.99, "cosine_p01": 0.9,
                                                                 "top10_overlap": 0.9, "recall_regression": 0.01}},
    "max_batch_tokens": 512, "bucket_max_batch": {"16": 32}, "server_python": "3.11", "bundle": None,
    "rebuild": "embtrt build ...", "parity": {"passed": True},
}


def test_schema_1_is_read_with_defaults_and_written_back_as_the_current_schema(tmp_path):
    (tmp_path / "embtrt.json").write_text(json.dumps(V1))
    m = read_manifest(tmp_path)
    assert (m.name, m.dim, m.buckets, m.max_batch_size, m.overflow_stride) == ("m", 8, (16,), 32, 4)
    assert m.prompts == {} and m.default_prompt_name is None and m.include_prompt and m.dimensions is None
    assert m.gate.cosine_p50 == 0.99 and m.bucket_batch(16) == 32
    assert m.extra["rebuild"] == "embtrt build ..." and m.extra["parity"] == {"passed": True}
    write_manifest(tmp_path, m)
    doc = json.loads((tmp_path / "embtrt.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION and "embtrt_manifest" not in doc
    assert doc["rebuild"] == "embtrt build ..." and doc["models"]["encoders"] == ["m_16_encoder"]
    assert read_manifest(tmp_path) == Manifest.from_dict(doc)


def test_a_newer_schema_is_refused_with_the_versions_named(tmp_path):
    (tmp_path / "embtrt.json").write_text(json.dumps({**V1, "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(RepositoryError, match=f"schema {SCHEMA_VERSION + 1} is newer") as err:
        read_manifest(tmp_path)
    assert "upgrade embtrt" in err.value.hint


@pytest.mark.parametrize("doc, pattern", [
    ({"name": "x"}, "no schema_version"),
    ({**V1, "schema_version": 0}, "too old"),
    ({**{k: v for k, v in V1.items() if k != "buckets"}, "schema_version": 2}, "malformed .*buckets"),
])
def test_missing_old_or_malformed_manifests_are_clear_errors(tmp_path, doc, pattern):
    (tmp_path / "embtrt.json").write_text(json.dumps(doc))
    with pytest.raises(RepositoryError, match=pattern):
        read_manifest(tmp_path)


def test_no_manifest_names_the_folder(tmp_path):
    with pytest.raises(RepositoryError, match="has no embtrt.json"):
        read_manifest(tmp_path)


def test_kind_is_read_and_written_and_an_unknown_kind_is_refused(tmp_path):
    doc = {**V1, "schema_version": SCHEMA_VERSION, "kind": "reranker", "num_labels": 1, "activation": "sigmoid"}
    (tmp_path / "embtrt.json").write_text(json.dumps(doc))
    m = read_manifest(tmp_path)
    assert (m.kind, m.num_labels, m.activation) == ("reranker", 1, "sigmoid")
    assert m.to_dict()["kind"] == "reranker"
    with pytest.raises(RepositoryError, match=r"a reranker: `embtrt matrix` measures bucket models, which only "
                                              r"repositories of an embedder have"):   # its routing is the front door
        m.require_length_pools("embtrt matrix")
    (tmp_path / "embtrt.json").write_text(json.dumps({**V1, "schema_version": 2}))
    assert read_manifest(tmp_path).kind == "embedder"   # schemas 1 and 2 are embedders
    assert read_manifest(tmp_path).require_length_pools("embtrt matrix").kind == "embedder"
    (tmp_path / "embtrt.json").write_text(json.dumps({**doc, "kind": "colbert"}))
    with pytest.raises(RepositoryError, match="unknown kind of model 'colbert'"):
        read_manifest(tmp_path)
