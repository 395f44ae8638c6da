"""Every CPU target of the multi-vector (ColBERT, bge-m3), text-and-image and classifier kinds built, served on a
real tritonserver and compared with its reference library at the kind's fp32 bound (#68 item 3): python-ort in
the kinds' own modules (session fixtures), python-openvino, python-torch and onnxruntime here.

The onnxruntime target's encoder models need Triton's onnxruntime backend, which the bundled tritonserver lacks:
they run in tests/ort_standin.py's stand-in (the same model.onnx in ONNX Runtime, the same config), the rest of
the repository (front door, BLS calls, tokenizer, pooling, image preprocessing) as built. Each build's own gate
passing is read too, but the verdict here is the served answer against MultiVectorEncoder, FlagEmbedding's
BGEM3FlagModel, SentenceTransformer.encode or transformers' text-classification pipeline."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import start_server
from embtrt.export import build
from embtrt.export.spec_options import spec_from_options
from embtrt.reference.parity import cosine_rows
from embtrt.repository.manifest import read_manifest
from ort_standin import served_copy
from parity_helpers import assert_rows_distinguishable
from test_classifier import _by_label, _pipeline
from test_multivector import _same_vectors

# slow: a build per kind and target, each served (make test-all); the kinds' python-ort builds are served in
# the default tier
pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOL = 1e-4          # fp32: max |difference| of a vector, weight or score, as the kinds' gates
COS = 0.99999       # fp32: the embedders' and text-and-image towers' cosine bound


def _texts(corpus, n=10):
    return [t for t in corpus if len(t) < 200][:n] + ["Hello, world!", " ".join(corpus[:6])]   # one over the cut


def _builds(folder, tmp_path, corpus, key, targets, **kw) -> dict[str, tuple]:
    """Each target built on a sixth of the corpus -> {target: (repository to serve, model name)}; the
    onnxruntime repository through the stand-in."""
    small = tmp_path / "corpus.json"
    small.write_text(json.dumps(corpus[::6]))
    out = {}
    for target in targets:
        name = f"{key}_{target.replace('-', '_')}"
        repo = tmp_path / target
        build(spec_from_options(folder, repo, name=name, target=target, **kw), corpus=small, log=lambda _m: None)
        m = read_manifest(repo)
        assert (m.target, m.extra["parity"]["passed"]) == (target, True), (target, m.extra["parity"])
        if target == "onnxruntime":
            repo, stood_in = served_copy(repo, tmp_path / "onnxruntime-served")
            assert stood_in and all(s.startswith(name + "_") for s in stood_in), stood_in
        out[target] = (repo, name)
    return out


def _against(verify, srv, builds: dict, texts: list[str]) -> None:
    """`embtrt verify --against` of the first two targets' deployments: passes at the kinds' fp32 bounds."""
    (_, a), (_, b) = list(builds.values())[:2]
    rep = verify(srv.grpc_url, a, None, texts, against=(srv.grpc_url, b), log=lambda _m: None)
    assert rep.passed and rep.figures["against"]["model"] == b, rep.failures


def _serve(builds: dict, tmp_path):
    first, *more = [repo for repo, _ in builds.values()]
    (tmp_path / "server").mkdir()
    return start_server(first, tmp_path / "server", *more)


def test_colbert_on_openvino_and_onnxruntime_serves_multivectorencoder(multivectors, corpus, tmp_path):
    from sentence_transformers import MultiVectorEncoder

    from embtrt.kinds.multivector.serve import MultiVectorClient

    texts = _texts(corpus)
    ref = MultiVectorEncoder(str(multivectors["colbert"]), device="cpu")
    q_want = ref.encode_query(texts, convert_to_numpy=True)
    d_want = ref.encode_document(texts, convert_to_numpy=True)
    assert_rows_distinguishable(np.stack([v.mean(0) for v in d_want]), 10 * TOL, "ColBERT documents")
    builds = _builds(multivectors["colbert"], tmp_path, corpus, "colbert", ("python-openvino", "onnxruntime"))
    with _serve(builds, tmp_path) as srv:
        for target, (_, name) in builds.items():
            c = MultiVectorClient(srv.grpc_url, name, batch_size=5)
            q, d = c.encode_query(texts), c.encode_document(texts)
            assert _same_vectors(q, q_want) <= TOL and _same_vectors(d, d_want) <= TOL, target
            want = ref.similarity(q_want[:4], d_want).numpy()
            assert np.abs(c.similarity(q[:4], d) - want).max() <= TOL, target
        from embtrt.kinds.multivector.measure import verify_multivector

        _against(verify_multivector, srv, builds, texts)


def test_bge_m3_on_openvino_torch_and_onnxruntime_serves_flagembedding(multivectors, corpus, tmp_path):
    from tiny_multivector import flag_m3

    from embtrt.kinds.multivector.serve import MultiVectorClient

    texts = _texts(corpus)
    want = flag_m3(multivectors["m3"]).encode(texts, max_length=64, return_dense=True, return_sparse=True,
                                              return_colbert_vecs=True)
    assert_rows_distinguishable(want["dense_vecs"], 10 * TOL, "bge-m3 dense vectors")
    builds = _builds(multivectors["m3"], tmp_path, corpus, "m3", ("python-openvino", "python-torch", "onnxruntime"))
    with _serve(builds, tmp_path) as srv:
        for target, (_, name) in builds.items():
            c = MultiVectorClient(srv.grpc_url, name, batch_size=4)
            got = c.encode(texts, return_dense=True, return_sparse=True, return_colbert_vecs=True)
            assert cosine_rows(got["dense_vecs"], want["dense_vecs"]).min() >= COS, target
            assert _same_vectors(got["colbert_vecs"], want["colbert_vecs"]) <= TOL, target
            for ours, theirs in zip(got["lexical_weights"], want["lexical_weights"], strict=True):
                assert set(ours) == set(theirs), target
                assert max((abs(ours[k] - float(theirs[k])) for k in theirs), default=0.0) <= TOL, target
        from embtrt.kinds.multivector.measure import verify_multivector

        _against(verify_multivector, srv, builds, texts)


def test_clip_on_openvino_torch_and_onnxruntime_serves_sentence_transformers(clips, corpus, tmp_path):
    from sentence_transformers import SentenceTransformer
    from tiny_images import FORMS, encoded_form

    from embtrt.kinds.multimodal.reference import data_uri, gate_images
    from embtrt.kinds.multimodal.reference_gate import retrieval
    from embtrt.kinds.multimodal.serve import ImageEmbeddingClient

    texts = _texts(corpus, 16)
    images = [encoded_form(k) for k in FORMS[:4]] + [f for f, _ in gate_images(6, seed=7)]
    ref = SentenceTransformer(str(clips["clip"]), device="cpu")
    want_t, want_i = ref.encode(texts), ref.encode([data_uri(x, "png") for x in images])
    assert_rows_distinguishable(want_i, 10 * TOL, "CLIP image vectors")
    builds = _builds(clips["clip"], tmp_path, corpus, "clip", ("python-openvino", "python-torch", "onnxruntime"))
    image_cfg = (builds["onnxruntime"][0] / "clip_onnxruntime_image" / "config.pbtxt").read_text()
    assert "dims: [ 3, 224, 224 ]" in image_cfg   # the image tower's model, as rendered, in the stand-in
    with _serve(builds, tmp_path) as srv:
        for target, (_, name) in builds.items():
            with ImageEmbeddingClient(srv.grpc_url, name) as c:
                got_t, got_i = c.embed(texts), c.embed_images(images)
            assert cosine_rows(got_t, want_t).min() >= COS and np.abs(got_t - want_t).max() <= TOL, target
            assert cosine_rows(got_i, want_i).min() >= COS and np.abs(got_i - want_i).max() <= TOL, target
            assert retrieval(got_t, got_i, want_t, want_i).passes("fp32"), target
            assert retrieval(got_i, got_t, want_i, want_t).passes("fp32"), target
        from embtrt.kinds.multimodal.measure import verify_multimodal

        _against(verify_multimodal, srv, builds, texts)


def test_the_classifier_on_openvino_torch_and_onnxruntime_serves_the_pipeline(classifiers, corpus, tmp_path):
    from embtrt.kinds.classifier.serve import ClassifyClient

    texts = _texts(corpus)
    pipe = _pipeline(classifiers["bert-cls3"])
    labels = [pipe.model.config.id2label[i] for i in range(pipe.model.config.num_labels)]
    want = _by_label(pipe(texts, truncation=True, max_length=64), labels)
    logits = _by_label(pipe(texts, truncation=True, max_length=64, function_to_apply="none"), labels)
    assert_rows_distinguishable(logits, 10 * TOL, "classifier logits")
    builds = _builds(classifiers["bert-cls3"], tmp_path, corpus, "cls", ("python-openvino", "python-torch", "onnxruntime"),
                     max_seq_length=64)
    with _serve(builds, tmp_path) as srv:
        for target, (_, name) in builds.items():
            with ClassifyClient(srv.grpc_url, name) as c:
                assert c.labels == labels, target
                got, _ = c.scores(texts)
                raw, _ = c.scores(texts, activation="raw")
            assert np.abs(got - want).max() <= TOL and np.abs(raw - logits).max() <= TOL, target
        from embtrt.kinds.classifier.measure import verify_classifier

        _against(verify_classifier, srv, builds, texts)
