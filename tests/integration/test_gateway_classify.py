"""Classifiers behind `embtrt gateway` (#51): TEI's /predict (a text, a pair, a batch of texts or of
pairs), vLLM's /classify, and Hugging Face Hub's InferenceClient.text_classification on POST / (its
base URL), each equal to transformers' text-classification pipeline (within 1e-4); /info describes the
default classifier; bad bodies get each route's error shape and serving goes on. Two classifiers (a
softmax and a multi-label one) on the session's classifier server, --default-model names one."""

from itertools import pairwise

import httpx
import pytest

from test_gateway import _tei, gateway

pytestmark = pytest.mark.integration
TOL = 1e-4


@pytest.fixture(scope="module")
def url(classifier_repos, classifier_server, tmp_path_factory):
    repos = list(classifier_repos.values())
    with gateway(repos[0], tmp_path_factory.mktemp("gw-cls") / "gw.log", *map(str, repos[1:]), "--triton",
                 classifier_server.grpc_url, "--default-model", "bert_cls3", "--max-items", "16") as u:
        yield u


@pytest.fixture(scope="module")
def pipes(classifiers):
    from transformers import pipeline

    return {k: pipeline("text-classification", model=str(p), device="cpu", top_k=None) for k, p in classifiers.items()}


@pytest.fixture(scope="module")
def texts(corpus):
    return [t for t in corpus if len(t) < 200][:6] + [" ".join(corpus[:6])]


def _ref(pipe, items) -> list[list[dict]]:
    return pipe(items, truncation=True, max_length=64)


def _same(got: list[dict], want: list[dict]) -> None:
    """Two lists of {label, score}: the same labels in the same order (highest first), scores within TOL."""
    assert [g["label"] for g in got] == [w["label"] for w in want], (got, want)
    assert max(abs(g["score"] - w["score"]) for g, w in zip(got, want, strict=True)) <= TOL


def test_tei_predict_shapes_equal_the_pipeline(url, pipes, texts):
    pipe = pipes["bert-cls3"]
    one = httpx.post(url + "/predict", json={"inputs": texts[0]}, timeout=30)
    assert one.status_code == 200, one.text
    _same(one.json(), _ref(pipe, [texts[0]])[0])
    assert int(one.headers["x-compute-tokens"]) > 2 and one.headers["x-compute-characters"] == str(len(texts[0]))
    pair = httpx.post(url + "/predict", json={"inputs": [texts[1], texts[2]]}, timeout=30).json()
    _same(pair, _ref(pipe, [{"text": texts[1], "text_pair": texts[2]}])[0])
    batch = httpx.post(url + "/predict", json={"inputs": [[t] for t in texts]}, timeout=30).json()
    for got, want in zip(batch, _ref(pipe, texts), strict=True):
        _same(got, want)
    pairs = httpx.post(url + "/predict", json={"inputs": [[a, b] for a, b in pairwise(texts)]}, timeout=30).json()
    for got, want in zip(pairs, _ref(pipe, [{"text": a, "text_pair": b} for a, b in pairwise(texts)]), strict=True):
        _same(got, want)
    # texts and pairs in one batch, as TEI takes them: two calls upstream, back in order
    mixed = [[texts[0]], [texts[1], texts[2]], [texts[3]], [texts[4], texts[5]]]
    got = httpx.post(url + "/predict", json={"inputs": mixed}, timeout=30).json()
    want = _ref(pipe, [texts[0], {"text": texts[1], "text_pair": texts[2]}, texts[3], {"text": texts[4], "text_pair": texts[5]}])
    assert len(got) == 4
    for g, w in zip(got, want, strict=True):
        _same(g, w)
    raw = httpx.post(url + "/predict", json={"inputs": texts[0], "raw_scores": True}, timeout=30).json()
    _same(raw, pipe([texts[0]], truncation=True, max_length=64, function_to_apply="none")[0])   # the logits
    # the multi-label model by name: sigmoid per label (transformers' rule)
    ml = httpx.post(url + "/predict", json={"model": "xlmr_ml4", "inputs": [[t] for t in texts]}, timeout=30).json()
    for got, want in zip(ml, _ref(pipes["xlmr-ml4"], texts), strict=True):
        _same(got, want)


def test_vllm_classify_and_inference_client_on_root(url, pipes, texts):
    from huggingface_hub import InferenceClient

    pipe = pipes["bert-cls3"]
    labels = [pipe.model.config.id2label[i] for i in range(3)]
    r = httpx.post(url + "/classify", json={"model": "bert_cls3", "input": texts}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["id"].startswith("classify-") and body["usage"]["prompt_tokens"] > len(texts)
    for d, want in zip(body["data"], _ref(pipe, texts), strict=True):
        probs = {w["label"]: w["score"] for w in want}
        assert d["num_classes"] == 3 and d["label"] == want[0]["label"]
        assert max(abs(p - probs[lab]) for p, lab in zip(d["probs"], labels, strict=True)) <= TOL
    # InferenceClient posts {"inputs", "parameters"} to its base URL: every label, highest first
    got = InferenceClient(base_url=url).text_classification(texts[3])
    want = _ref(pipe, [texts[3]])[0]
    assert [g.label for g in got] == [w["label"] for w in want]
    assert max(abs(g.score - w["score"]) for g, w in zip(got, want, strict=True)) <= TOL
    top = InferenceClient(base_url=url).text_classification(texts[3], top_k=1, function_to_apply="sigmoid")
    sig = pipe([texts[3]], truncation=True, max_length=64, function_to_apply="sigmoid")[0][:1]
    assert [t.label for t in top] == [s["label"] for s in sig]
    assert abs(top[0].score - sig[0]["score"]) <= TOL and abs(sig[0]["score"] - want[0]["score"]) > 100 * TOL
    info = httpx.get(url + "/info").json()
    assert info["model_id"] == "bert_cls3" and info["model_type"]["classifier"]["id2label"] == dict(zip("012", labels, strict=True))


def test_bad_classify_bodies_get_each_routes_shape_and_serving_goes_on(url, texts):
    _tei(httpx.post(url + "/predict", json={"inputs": []}, timeout=30), 400, "Empty", "inputs must be a non-empty list")
    _tei(httpx.post(url + "/predict", json={"inputs": ["a", "b", "c"]}, timeout=30), 422, "Validation",
         "a list of texts is one pair")
    _tei(httpx.post(url + "/predict", json={"inputs": [["a"], ["b", "c", "d"]]}, timeout=30), 422, "Validation",
         "inputs[1] must be [text] or [text, text]")
    _tei(httpx.post(url + "/predict", json={"inputs": "a", "parameters": {"function_to_apply": ["none"]}}, timeout=30),
         422, "Validation", "function_to_apply must be softmax, sigmoid or none")
    _tei(httpx.post(url + "/predict", json={"inputs": [["a"]] * 17}, timeout=30), 422, "Validation",
         "batch size 17 > maximum allowed batch size 16")
    _tei(httpx.post(url + "/predict", json={"model": "nope", "inputs": "a"}, timeout=30), 422, "Validation",
         "the model 'nope' does not exist")
    r = httpx.post(url + "/classify", json={"input": [1, 2]}, timeout=30)
    err = r.json()["error"]
    assert r.status_code == 400 and err["type"] == "BadRequestError" and err["param"] == "input"
    _tei(httpx.post(url + "/embed", json={"inputs": "a"}, timeout=30), 424, "Backend", "this gateway serves no embedder")
    assert httpx.post(url + "/predict", json={"inputs": texts[0]}, timeout=30).status_code == 200


@pytest.mark.parametrize("lacking, message", [
    ("classify", r"bert_cls3 \(a classifier\) serves the operation 'classify', but its gateway class Lacking lacks classify"),
    ("tei_type", r"bert_cls3 \(a classifier\): its gateway class Lacking lacks tei_type, which the gateway calls on every model"),
])
def test_a_model_lacking_what_its_operations_call_stops_the_gateway_at_start(classifier_repos, monkeypatch, lacking, message):
    """Capabilities are checked when the gateway starts (registry.check_capabilities), not found as a 500 on the
    first request (GET /info once called a tei_type the text-and-image gateway class lacked)."""
    from embtrt.errors import SpecError
    from embtrt.kinds.classifier import scale
    from embtrt.scale.gateway.config import GatewayConfig
    from embtrt.scale.gateway.registry import MultiGateway

    monkeypatch.setattr(scale, "Classifier", type("Lacking", (scale.Classifier,), {lacking: None}))
    with pytest.raises(SpecError, match=message):
        MultiGateway(GatewayConfig(repository=classifier_repos["bert-cls3"], triton="127.0.0.1:1"))
    monkeypatch.undo()
    gw = MultiGateway(GatewayConfig(repository=classifier_repos["bert-cls3"], triton="127.0.0.1:1"))   # the control
    assert list(gw.models) == ["bert_cls3"]
