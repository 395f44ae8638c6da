"""Multi-vector models (#52): a ColBERT MultiVectorEncoder and a bge-m3-shaped folder build, pass their
gates and serve over gRPC on a real tritonserver exactly what the references give in process:
MultiVectorEncoder.encode_query / encode_document and similarity (MaxSim), FlagEmbedding's
BGEM3FlagModel.encode (dense, lexical weights, ColBERT vectors from one pass)."""

import numpy as np
import pytest

from embtrt.errors import ModelError, ParityError
from embtrt.export import build
from embtrt.export.spec_options import spec_from_options
from embtrt.kinds.multivector.serve import MultiVectorClient
from embtrt.repository.manifest import read_manifest

pytestmark = pytest.mark.integration
TOL = 1e-4


@pytest.fixture(scope="module")
def texts(corpus):
    short = [t for t in corpus if len(t) < 200][:12]
    return short + ["Hello, world!", "What is ColBERT? A late-interaction model (2020).", " ".join(corpus[:6])]


@pytest.fixture(scope="module")
def colbert_ref(multivectors):
    from sentence_transformers import MultiVectorEncoder

    return MultiVectorEncoder(str(multivectors["colbert"]), device="cpu")


@pytest.fixture(scope="module")
def m3_ref(multivectors):
    from tiny_multivector import flag_m3

    return flag_m3(multivectors["m3"])


def _same_vectors(got: list, want: list) -> float:
    assert [len(g) for g in got] == [len(w) for w in want]   # the same number of vectors, text by text
    return max(float(np.abs(g - np.asarray(w)).max()) for g, w in zip(got, want, strict=True))


def test_detection_and_the_built_manifests(multivectors, multivector_repos):
    from embtrt.reference.detect import detect

    def detect_kind(folder):
        found = detect(folder)
        return found.kind.name, found.why

    assert detect_kind(multivectors["colbert"]) == ("multivector", "config_sentence_transformers.json says model_type "
                                                    "MultiVectorEncoder (ColBERT)")
    kind, why = detect_kind(multivectors["m3"])
    assert kind == "multivector" and "colbert_linear.pt and sparse_linear.pt" in why
    for key, repo in multivector_repos.items():
        m = read_manifest(repo)
        assert m.kind == "multivector" and m.extra["parity"]["passed"], key
    assert read_manifest(multivector_repos["colbert"]).extra["parity"]["retrieval"]["within_ties"] == 16


def test_a_bge_m3_folder_missing_a_head_file_is_refused(multivectors, tmp_path):
    import shutil

    folder = tmp_path / "m3-one-head"
    shutil.copytree(multivectors["m3"], folder)
    (folder / "sparse_linear.pt").unlink()
    with pytest.raises(ModelError, match="no sparse_linear.pt") as err:
        spec_from_options(folder, tmp_path / "out")
    assert "random weights" in err.value.hint


@pytest.mark.parametrize("model", ["colbert", "colbert_torch"])   # python-ort, python-torch
def test_colbert_over_grpc_equals_multivectorencoder(multivector_server, colbert_ref, texts, model):
    c = MultiVectorClient(multivector_server.grpc_url, model, batch_size=5)
    q_want = colbert_ref.encode_query(texts, convert_to_numpy=True)
    d_want = colbert_ref.encode_document(texts, convert_to_numpy=True)
    q, d = c.encode_query(texts), c.encode_document(texts)
    assert all(len(v) == 32 for v in q)   # queries expanded to exactly 32 vectors
    assert _same_vectors(q, q_want) <= TOL and _same_vectors(d, d_want) <= TOL
    assert len(d[-3]) == 5    # "Hello, world!": [CLS] passage world hello [SEP]; ':' ',' '!' skiplisted
    want = colbert_ref.similarity(q_want[:6], d_want).numpy()
    assert np.abs(c.similarity(q[:6], d) - want).max() <= TOL
    assert (np.argsort(-c.similarity(q[:6], d), axis=1)[:, :10] == np.argsort(-want, axis=1)[:, :10]).all()


def test_bge_m3_three_outputs_over_grpc_equal_flagembedding(multivector_server, m3_ref, texts):
    c = MultiVectorClient(multivector_server.grpc_url, "m3", batch_size=4)
    # the tiny model takes 64 tokens (the build's default cut: 512 or the model's limit, the smaller)
    want = m3_ref.encode(texts, max_length=64, return_dense=True, return_sparse=True, return_colbert_vecs=True)
    got = c.encode(texts, return_dense=True, return_sparse=True, return_colbert_vecs=True)
    g, w = got["dense_vecs"], want["dense_vecs"]
    cos = (g * w).sum(1) / np.linalg.norm(g, axis=1) / np.linalg.norm(w, axis=1)
    assert cos.min() >= 0.99999
    assert _same_vectors(got["colbert_vecs"], want["colbert_vecs"]) <= TOL
    assert sum(len(x) for x in want["lexical_weights"]) > 3 * len(texts)   # the seeded head keeps weights
    for ours, theirs in zip(got["lexical_weights"], want["lexical_weights"], strict=True):
        assert set(ours) == set(theirs)   # the same token ids
        assert max((abs(ours[k] - float(theirs[k])) for k in theirs), default=0.0) <= TOL
    only = c.encode(texts[:3], return_dense=False, return_sparse=True)   # any subset, from one pass
    assert only["dense_vecs"] is None and only["lexical_weights"] == got["lexical_weights"][:3]
    # bge-m3's token vectors are its ColBERT vectors for either side
    assert _same_vectors(c.encode_query(texts[:3]), want["colbert_vecs"][:3]) <= TOL


def test_bad_requests_name_their_fault_and_serving_continues(multivector_server, texts):
    from embtrt.errors import ClientError

    c = MultiVectorClient(multivector_server.grpc_url, "colbert", retries=0)
    long = " ".join(texts)
    for kwargs, needle in (({"input_type": "sideways"}, "input_type"), ({"truncate": "NONE"}, "row 1"),
                           ({"prompt_name": "nope"}, "prompt_name")):
        with pytest.raises(ClientError, match=needle):
            c.token_vectors(["short", long], **kwargs)
    assert len(c.encode_document(["still served"])) == 1


def test_queries_and_documents_batched_together_equal_each_alone(multivector_repos, colbert_ref, texts):
    """One batch of the front door's core mixing expanded queries (positions run, not attended) with
    documents, in the same bucket's chunks, gives each request what it gets alone."""
    import json

    from embtrt_backend.encoder import OrtEncoder
    from embtrt_backend.kinds.multivector.core import MultiVectorCore, MultiVectorRequest
    from embtrt.repository.config import parse_config

    folder = multivector_repos["colbert"] / "colbert" / "1"
    params = {k: v.string_value for k, v in parse_config(folder.parent / "config.pbtxt").parameters.items()}
    core = MultiVectorCore.from_folder(str(folder), params)
    enc = OrtEncoder(str(folder / "model.onnx"))
    run = lambda b, feeds: enc.run(feeds)
    reqs = [MultiVectorRequest(texts[:4], core.options({"input_type": "query"})),
            MultiVectorRequest(texts[4:9], core.options({"input_type": "document"})),
            MultiVectorRequest(texts[9:11], core.options({"input_type": "query"}))]
    together = core.run(reqs, run)
    assert len(together[0].vectors) == 4 and json.dumps(params["mv_expansion_id"]) == '"103"'
    for r, got in zip(reqs, together, strict=True):
        alone = core.run([r], run)[0]
        assert [len(v) for v in got.vectors] == [len(v) for v in alone.vectors]
        assert max(float(np.abs(a - b).max()) for a, b in zip(got.vectors, alone.vectors, strict=True)) <= 1e-5
    want = colbert_ref.encode_query(texts[9:11], convert_to_numpy=True)
    assert _same_vectors(together[2].vectors, want) <= TOL


def test_the_encode_command_prints_each_texts_vectors(multivector_server, m3_ref):
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "embtrt.cli", "encode", "hello world, again", "--url", multivector_server.grpc_url,
                          "--model", "m3", "--dense", "--sparse", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    want = m3_ref.encode(["hello world, again"], max_length=64, return_dense=True, return_sparse=True,
                         return_colbert_vecs=True)
    assert np.abs(np.asarray(doc["dense_vecs"]) - want["dense_vecs"]).max() <= TOL
    assert set(doc["lexical_weights"][0]) == set(want["lexical_weights"][0])
    assert np.asarray(doc["colbert_vecs"][0]).shape == want["colbert_vecs"][0].shape


@pytest.mark.parametrize("key", ["colbert", "m3"])
def test_verify_gates_a_served_model_and_holds_under_load(multivector_server, multivectors, corpus, key):
    from embtrt.kinds.multivector.measure import verify_multivector

    texts = corpus[::10]
    rep = verify_multivector(multivector_server.grpc_url, key, multivectors[key], texts, under_load=True, concurrency=4,
                             log=lambda m: None)
    assert rep.passed, rep.failures
    assert rep.figures["under_load"]["failed"] == 0 and rep.figures["under_load"]["max_abs_diff"] <= TOL
    if key == "colbert":   # against another target's deployment (bge-m3's: test_kind_targets_served)
        other = verify_multivector(multivector_server.grpc_url, key, None, texts,
                                   against=(multivector_server.grpc_url, "colbert_torch"), log=lambda m: None)
        assert other.passed and 0 < other.figures["against"]["max_abs_diff"] <= TOL, other.failures


def test_reduced_precision_is_judged_by_the_reduced_gate(multivectors, tmp_path, corpus):
    """python-ort int8: the gate's reduced limits (cosine per vector, MaxSim relative, top-10 overlap and NDCG@10):
    the tiny random model's int8 graph keeps its vectors (cosine >= 0.99) but moves its retrieval (overlap 0.969,
    NDCG@10 regression 0.008 here), so the build refuses it, and records it as refused with --allow-mismatch."""
    import json

    small = tmp_path / "corpus.json"
    small.write_text(json.dumps(corpus[::6]))
    build(spec_from_options(multivectors["colbert"], tmp_path / "r", name="colbert_int8", precision="int8",
                            allow_mismatch=True), corpus=small, log=lambda m: None)
    par = read_manifest(tmp_path / "r").extra["parity"]
    assert par["precision"] == "int8" and not par["passed"] and par["allowed_mismatch"]
    assert any(f.startswith("retrieval: top-10 overlap") for f in par["failures"]), par["failures"]
    assert par["retrieval"]["overlap"] < 0.98 and par["retrieval"]["queries"] == 16
    assert all(b["error"] <= 1e-2 for b in par["buckets"].values())   # every vector's cosine >= 0.99
    with pytest.raises(ParityError, match="retrieval: top-10 overlap"):
        build(spec_from_options(multivectors["colbert"], tmp_path / "refused", name="colbert_int8", precision="int8"),
              corpus=small, log=lambda m: None)
    assert not (tmp_path / "refused" / "embtrt.json").exists()
