"""ColQwen2-style page-image retrievers (#70 item 1): a tiny seeded ColQwen2ForRetrieval folder (Qwen2-VL, dynamic
resolution: a page's token count follows its size) built on python-torch as the page kind, gated, served on a real
tritonserver and behind `embtrt gateway`, equal to transformers' ColQwen2ForRetrieval on ColQwen2Processor's output
(PIL backend; its 1-D positions, docs/visual-documents.md) for queries and pages of several lengths, MaxSim against
score_retrieval of each page alone (Cohere's SDK on the rerank route); hostile pages refused naming their row while
serving goes on; `embtrt verify`."""


import numpy as np
import pytest

from conftest import start_server
from test_gateway import gateway
from tiny_images import hostile_images

pytestmark = pytest.mark.integration
COS, TOL = 0.9999, 1e-4
QUERIES = ["what is the revenue in the third quarter?", "a chart of sales by region", "Hello, world!", "le rapport annuel"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from tiny_pages import make_colqwen2

    return make_colqwen2(tmp_path_factory.mktemp("colqwen") / "colqwen")


@pytest.fixture(scope="module")
def repo(folder, tmp_path_factory):
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    spec = spec_from_options(folder, tmp_path_factory.mktemp("colqwen-repo") / "repo")   # --target auto: python-torch
    assert (spec.kind, spec.target, spec.input_names) == ("pages", "python-torch", ("input_ids", "attention_mask"))
    return build(spec, log=lambda _: None).repository


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    with start_server(repo, tmp_path_factory.mktemp("colqwen-srv")) as srv:
        yield srv


@pytest.fixture(scope="module")
def ref(folder):
    from embtrt.kinds.pages.reference import load_reference

    return load_reference(folder)


@pytest.fixture(scope="module")
def pages():
    """Pages of assorted sizes (a different number of image tokens each) and formats (encoded files)."""
    from embtrt.reference.images import gate_images

    return [f for f, _ in gate_images(8, seed=72)]


def _uri(f):
    from embtrt.reference.images import data_uri

    return data_uri(f, "png")


def _pil(files):
    from transformers.image_utils import load_image

    return [load_image(_uri(f)) for f in files]


def _close(got, want):
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        cos = (g * w).sum(1) / (np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1))
        assert cos.min() >= COS and np.abs(g - w).max() <= TOL


def test_detected_built_and_gated(folder, repo):
    from embtrt.reference.detect import detect
    from embtrt.repository.manifest import read_manifest

    assert detect(folder).kind.name == "pages"
    m = read_manifest(repo)
    parity = m.extra["parity"]
    assert m.kind == "pages" and parity["passed"], parity
    assert parity["score_error"] <= TOL


def test_served_queries_and_pages_of_several_lengths_equal_colqwen2_for_retrieval(server, ref, pages):
    from embtrt.kinds.pages.reference import encode_images, encode_queries, score
    from embtrt.kinds.pages.serve import PageImageClient

    want_q, want_p = encode_queries(ref, QUERIES), encode_images(ref, _pil(pages))
    with PageImageClient(server.grpc_url, "colqwen", batch_size=3) as c:
        got_q, got_p = c.encode_queries(QUERIES), c.encode_pages(pages)
        ours = c.score(got_q, got_p)
    _close(got_q, want_q)
    _close(got_p, want_p)
    assert np.abs(ours - score(ref, want_q, want_p)).max() <= TOL
    assert len({len(p) for p in got_p}) >= 3   # dynamic resolution: pages of other sizes, other token counts
    # told apart: every page's vectors differ from the others', and the ranking is not flat
    assert min(np.abs(a[-1] - b[-1]).max() for i, a in enumerate(got_p) for b in got_p[i + 1:]) > 1e-2
    assert all(np.ptp(row) > 0.1 for row in ours)


def test_hostile_pages_are_refused_naming_their_row_and_serving_goes_on(server, pages):
    import tritonclient.grpc as grpcclient

    from embtrt.kinds.pages.serve import PageImageClient
    from embtrt.serve.wire import text_input

    cases = hostile_images(pages[0])
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for bad, said in cases.items():
            with pytest.raises(grpcclient.InferenceServerException, match=said):
                c.infer("colqwen", [text_input([pages[0], bad], "IMAGE")])
        with pytest.raises(grpcclient.InferenceServerException, match="row 1: the query is .* tokens, over this model's 512"):
            c.infer("colqwen", [text_input(["short", "word " * 600])])
    finally:
        c.close()
    with PageImageClient(server.grpc_url, "colqwen") as pc:   # serving goes on
        assert len(pc.encode_pages(pages[:2])) == 2 and len(pc.encode_queries(["still here"])) == 1


@pytest.fixture(scope="module")
def url(repo, server, tmp_path_factory):
    with gateway(repo, tmp_path_factory.mktemp("gw-colqwen") / "gw.log", "--triton", server.grpc_url) as u:
        yield u


def test_gateway_ranks_pages_of_several_lengths_by_maxsim(url, ref, pages):
    import cohere
    import httpx

    from embtrt.kinds.pages.reference import encode_images, encode_queries, score

    want = score(ref, encode_queries(ref, QUERIES[:1]), encode_images(ref, _pil(pages)))[0]
    v2 = cohere.ClientV2(api_key="unused", base_url=url)
    got = v2.rerank(model="colqwen", query=QUERIES[0], documents=[_uri(f) for f in pages])
    assert [r.index for r in got.results] == np.argsort(-want, kind="stable").tolist()
    assert max(abs(r.relevance_score - want[r.index]) for r in got.results) <= TOL
    models = httpx.get(url + "/v1/models", timeout=30).json()["data"]
    assert models[0]["page_positions"] == "per page"


def test_verify_gates_the_served_model(server, folder, corpus):
    from embtrt.kinds.pages.measure import PagesMeasure

    rep = PagesMeasure.verify(server.grpc_url, "colqwen", folder, corpus[:40], under_load=True, concurrency=4,
                              log=lambda _: None)
    assert rep.passed, rep.failures
