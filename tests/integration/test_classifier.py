"""Classifier models, the fourth kind (#51): a *ForSequenceClassification folder of several labels
(not saved as a CrossEncoder) builds as a classifier, passes its gate against transformers on every
CPU target, and serves over gRPC on a real tritonserver what transformers' text-classification
pipeline gives: softmax over the labels (bert_cls3), sigmoid per label for a multi-label model
(xlmr_ml4), the logits on request; single texts and text pairs."""

import json
import subprocess
import sys

import numpy as np
import pytest

from parity_helpers import assert_rows_distinguishable
from embtrt.export.spec_options import spec_from_options
from embtrt.kinds.classifier.serve import ClassifyClient
from embtrt.repository.manifest import read_manifest

pytestmark = pytest.mark.integration
TOL = 1e-4


def _pipeline(folder):
    from transformers import pipeline

    return pipeline("text-classification", model=str(folder), device="cpu", top_k=None)


def _by_label(results: list[list[dict]], labels: list[str]) -> np.ndarray:
    """The pipeline's [{label, score}] (sorted) per text -> scores [texts, labels] in label-id order."""
    return np.array([[next(r["score"] for r in row if r["label"] == lab) for lab in labels] for row in results])


@pytest.fixture(scope="module")
def texts(corpus):
    short = [t for t in corpus if len(t) < 200][:10]
    return short + [" ".join(corpus[:6])]   # one text over the max length (64): cut as the pipeline cuts it


def test_kind_detection_says_which_rule_decided_and_kind_overrides(classifiers, cross_encoders):
    from embtrt.reference.detect import detect

    def detect_kind(folder):
        found = detect(folder)
        return found.kind.name, found.why

    kind, why = detect_kind(classifiers["bert-cls3"])
    assert kind == "classifier" and "3 labels" in why and "CrossEncoder" in why
    assert detect_kind(cross_encoders["xlmr-ce3"])[0] == "reranker"   # saved as a CrossEncoder: a reranker
    assert detect_kind(cross_encoders["bert-ce"])[0] == "reranker"
    spec = spec_from_options(classifiers["bert-cls3"], "/tmp/unused", max_seq_length=64)
    assert (spec.kind, spec.num_labels, spec.activation) == ("classifier", 3, "softmax")
    ml = spec_from_options(classifiers["xlmr-ml4"], "/tmp/unused", max_seq_length=64)
    assert (ml.kind, ml.activation) == ("classifier", "sigmoid")   # multi-label: transformers' sigmoid per label
    assert spec_from_options(classifiers["bert-cls3"], "/tmp/unused", kind="reranker", max_seq_length=64).kind == "reranker"


def test_grpc_scores_equal_the_transformers_pipeline(classifier_server, classifier_repos, classifiers, texts):
    import torch

    for key, name in (("bert-cls3", "bert_cls3"), ("xlmr-ml4", "xlmr_ml4")):
        m = read_manifest(classifier_repos[key])
        assert m.kind == "classifier" and m.extra["parity"]["passed"], m.extra["parity"]
        pipe = _pipeline(classifiers[key])
        with ClassifyClient(classifier_server.grpc_url, name) as c:
            labels = c.labels
            assert labels == [pipe.model.config.id2label[i] for i in range(len(labels))]
            got, tokens = c.scores(texts)
            want = _by_label(pipe(texts, truncation=True, max_length=64), labels)
            assert np.abs(got - want).max() <= TOL, (key, np.abs(got - want).max())
            assert_rows_distinguishable(want, 10 * TOL, key)   # a swapped or shifted row fails the check above
            assert tokens.max() == 64 and tokens.min() > 2
            # pairs: the pipeline's {"text", "text_pair"} inputs
            pairs = [t.split(".")[0][:60] for t in reversed(texts)]
            got_p, _ = c.scores(texts, pairs)
            want_p = _by_label(pipe([{"text": a, "text_pair": b} for a, b in zip(texts, pairs, strict=True)], truncation=True,
                                    max_length=64), labels)
            assert np.abs(got_p - want_p).max() <= TOL
            raw, _ = c.scores(texts, activation="raw")
            enc = pipe.tokenizer(texts, truncation=True, max_length=64, padding=True, return_tensors="pt")
            with torch.inference_mode():
                logits = pipe.model(**enc).logits.numpy()
            assert np.abs(raw - logits).max() <= TOL
            top = c.classify(texts[:2], top_k=2)
            assert [r["label"] for r in top[0]] == [labels[i] for i in np.argsort(-got[0])[:2]]
    # the multi-label model's scores are independent sigmoids (not summing to 1), the other's a softmax
    with ClassifyClient(classifier_server.grpc_url, "xlmr_ml4") as c:
        assert not np.allclose(c.scores(texts)[0].sum(axis=1), 1.0)
    with ClassifyClient(classifier_server.grpc_url, "bert_cls3") as c:
        assert np.allclose(c.scores(texts)[0].sum(axis=1), 1.0, atol=1e-5)


def test_verify_and_the_cli_over_grpc(classifier_server, classifiers, texts, corpus):
    from embtrt.kinds.classifier.measure import verify_classifier

    rep = verify_classifier(classifier_server.grpc_url, "bert_cls3", classifiers["bert-cls3"], corpus, under_load=True,
                            concurrency=8, log=lambda m: None)
    assert rep.passed, rep.failures
    gate = rep.figures["gate"]
    assert gate["label_agreement"] == 1.0 and gate["max_abs_diff"] <= TOL and gate["rows"] > 40
    assert rep.figures["under_load"]["failed"] == 0
    # `embtrt tune`'s trial on a classifier: requests of real texts through the load driver
    from embtrt.kinds.classifier.measure import ClassifyMeasure

    load = ClassifyMeasure(classifier_server.grpc_url, "bert_cls3").trial(corpus, 4, 24, 4)
    assert load.ok == 24 and not load.failures
    # `embtrt bench --classify`'s rows: the served model at each concurrency, then transformers in process
    from embtrt.kinds.classifier.measure import bench_classifier

    rows = bench_classifier(classifier_server.grpc_url, ["bert_cls3"], corpus, (1, 4), 4, 12, 2, classifiers["bert-cls3"])
    assert [(r["target"].split("@")[0], r["concurrency"]) for r in rows] == [
        ("triton:bert_cls3", 1), ("triton:bert_cls3", 4), ("inprocess:transformers(batch 32, fp32)", 1)]
    assert all(r["errors"] == 0 and r["texts_per_s"] > 0 for r in rows) and rows[0]["requests"] == 12
    out = subprocess.run([sys.executable, "-m", "embtrt.cli", "classify", texts[0], texts[1], "--model", "bert_cls3",
                          "--url", classifier_server.grpc_url, "--json", "--top-k", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    with ClassifyClient(classifier_server.grpc_url, "bert_cls3") as c:
        assert doc["results"] == c.classify(texts[:2], top_k=1)
