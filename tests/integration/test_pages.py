"""Page-image retrievers (#69 item 5, #70 item 1): a ColPali-shaped folder (image in, token vectors out: a new kind
of existing parts) built on python-torch, gated, served on a real tritonserver and behind `embtrt gateway`, equal to
transformers' ColPaliForRetrieval on its processor's output (PIL backend) and to sentence-transformers'
MultiVectorEncoder on its own save: queries (the processor's query augmentation), page images, MaxSim
(score_retrieval); the pages of the test told apart; hostile images and over-long queries refused naming their
row while serving goes on; the other targets refused saying why; `embtrt verify` of the served model."""


import httpx
import numpy as np
import pytest

from conftest import start_server
from test_gateway import gateway
from tiny_images import hostile_images, png_header_only

pytestmark = pytest.mark.integration
COS, TOL = 0.9999, 1e-4


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from tiny_pages import make_colpali

    root = tmp_path_factory.mktemp("pages")
    return {"colpali": make_colpali(root / "colpali"), "colpali_st": make_colpali(root / "colpali_st", st=True)}


@pytest.fixture(scope="module")
def repos(folders, tmp_path_factory):
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    root = tmp_path_factory.mktemp("pages-repos")
    return {name: build(spec_from_options(folder, root / name, name=name, target="python-torch"), log=lambda _: None).repository
            for name, folder in folders.items()}


@pytest.fixture(scope="module")
def server(repos, tmp_path_factory):
    with start_server(repos["colpali"], tmp_path_factory.mktemp("pages-srv"), repos["colpali_st"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def ref(folders):
    from embtrt.kinds.pages.reference import load_reference

    return load_reference(folders["colpali"])


@pytest.fixture(scope="module")
def pages():
    """Eight seeded page images of assorted sizes and formats (encoded files)."""
    from embtrt.reference.images import gate_images

    return [f for f, _ in gate_images(8, seed=70)]


QUERIES = ["what is the revenue in the third quarter?", "a chart of sales by region", "Hello, world!",
           "who signed the contract", "le rapport annuel"]


def _pil(files):
    """The files as the reference reads a page file (transformers' load_image of a data URI: upright, RGB), the path
    the served pages follow (an RGBA image's alpha dropped, not composited as a PIL image given to the processor)."""
    from transformers.image_utils import load_image

    return [load_image(_uri(f)) for f in files]


def _close(got, want):
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        cos = (g * w).sum(1) / (np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1))
        assert cos.min() >= COS and np.abs(g - w).max() <= TOL


def test_detected_built_and_gated(folders, repos):
    from embtrt.reference.detect import detect
    from embtrt.repository.manifest import read_manifest

    for name, folder in folders.items():   # the sentence-transformers save says MultiVectorEncoder: still pages
        assert detect(folder).kind.name == "pages", name
        m = read_manifest(repos[name])
        parity = m.extra["parity"]
        assert m.kind == "pages" and m.target == "python-torch" and parity["passed"], name
        assert parity["queries_cosine_min"] >= COS and parity["images_cosine_min"] >= COS
        assert parity["score_error"] <= TOL and parity["images"] == 16 and parity["queries"] == 24
        assert (repos[name] / name / "1" / "image_processor.json").is_file()
        assert "pillow" in m.bundle["packages"]


@pytest.mark.parametrize("target", ["python-ort", "onnxruntime", "tensorrt"])
def test_other_targets_are_refused_saying_why(folders, tmp_path, target):
    from embtrt.errors import SpecError
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    with pytest.raises(SpecError, match="python-torch only .the vision-language model's ONNX export is not done"):
        build(spec_from_options(folders["colpali"], tmp_path / "r", target=target), log=lambda _: None)


def test_served_queries_and_pages_equal_the_references(server, ref, folders, pages):
    from sentence_transformers import MultiVectorEncoder

    from embtrt.kinds.pages.reference import encode_images, encode_queries, score
    from embtrt.kinds.pages.serve import PageImageClient

    want_q, want_p = encode_queries(ref, QUERIES), encode_images(ref, _pil(pages))
    st = MultiVectorEncoder(str(folders["colpali_st"]), device="cpu")
    st_q = [v.numpy() for v in st.encode_query(QUERIES)]
    st_p = [v.numpy() for v in st.encode_document([_uri(f) for f in pages])]   # sentence-transformers loads the URIs
    for model, (wq, wp) in (("colpali", (want_q, want_p)), ("colpali_st", (st_q, st_p))):
        with PageImageClient(server.grpc_url, model, batch_size=3) as c:
            got_q, got_p = c.encode_queries(QUERIES), c.encode_pages(pages)
        _close(got_q, wq)
        _close(got_p, wp)
        theirs = score(ref, wq, wp) if model == "colpali" else st.similarity(st.encode_query(QUERIES),
                                                                              st.encode_document([_uri(f) for f in pages])).numpy()
        ours = c.score(got_q, got_p)
        assert np.abs(ours - theirs).max() <= TOL
    # told apart: every page's vectors and every query's differ from the others', and the ranking is not flat
    assert min(np.abs(a - b).max() for i, a in enumerate(got_p) for b in got_p[i + 1:]) > 1e-2
    assert all(np.ptp(row) > 0.1 for row in ours)
    assert got_q[2].shape[0] < got_q[0].shape[0]   # a shorter query, fewer vectors (its augmentation kept)


def test_hostile_inputs_are_refused_naming_their_row_and_serving_goes_on(server, pages):
    import tritonclient.grpc as grpcclient

    from embtrt.kinds.pages.serve import PageImageClient
    from embtrt.serve.wire import text_input

    cases = {**hostile_images(pages[0], thin=False),   # ColPali resizes every page to one size: no aspect-ratio refusal
             png_header_only(50_000, 50_000): "row 1: the image.s header claims more pixels than Pillow opens",
             b"https://example.com/page.png": "row 1: not an image"}
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for bad, said in cases.items():
            with pytest.raises(grpcclient.InferenceServerException, match=said):
                c.infer("colpali", [text_input([pages[0], bad], "IMAGE")])
        with pytest.raises(grpcclient.InferenceServerException, match="row 1: the query is .* tokens, over this model's 256"):
            c.infer("colpali", [text_input(["short", "word " * 300])])
        with pytest.raises(grpcclient.InferenceServerException, match="TEXT or IMAGE, not both"):
            c.infer("colpali", [text_input(["q"]), text_input([pages[0]], "IMAGE")])
        with pytest.raises(grpcclient.InferenceServerException, match="invalid input_type 'document': a text is a query"):
            c.infer("colpali", [text_input(["q"])], parameters={"input_type": "document"})
    finally:
        c.close()
    with PageImageClient(server.grpc_url, "colpali") as pc:   # serving goes on
        assert len(pc.encode_pages(pages[:2])) == 2 and len(pc.encode_queries(["still here"])) == 1


@pytest.fixture(scope="module")
def url(repos, server, tmp_path_factory):
    with gateway(repos["colpali"], tmp_path_factory.mktemp("gw-pages") / "gw.log", "--triton", server.grpc_url) as u:
        yield u


def _uri(f):
    from embtrt.reference.images import data_uri

    return data_uri(f, "png")


def test_gateway_ranks_pages_by_maxsim_on_the_rerank_routes(url, ref, pages):
    import cohere

    from embtrt.kinds.pages.reference import encode_images, encode_queries, score

    want = score(ref, encode_queries(ref, QUERIES[:1]), encode_images(ref, _pil(pages)))[0]
    v2 = cohere.ClientV2(api_key="unused", base_url=url)   # Cohere's SDK: documents as data-URI strings
    got = v2.rerank(model="colpali", query=QUERIES[0], documents=[_uri(f) for f in pages])
    assert [r.index for r in got.results] == np.argsort(-want, kind="stable").tolist()
    assert max(abs(r.relevance_score - want[r.index]) for r in got.results) <= TOL
    vllm = httpx.post(url + "/rerank", json={"model": "colpali", "query": QUERIES[0], "documents": {"content": [
        {"type": "image_url", "image_url": {"url": _uri(f)}} for f in pages]}}, timeout=60)   # vLLM's multimodal shape
    assert vllm.status_code == 200, vllm.text
    assert max(abs(r["relevance_score"] - want[r["index"]]) for r in vllm.json()["results"]) <= TOL
    for path, body, said in (
            ("/rerank", {"query": "q", "texts": ["a"]}, "ranks page images"),   # TEI's shape: text documents
            ("/score", {"model": "colpali", "text_1": "q", "text_2": ["a"]}, "vLLM's /score takes text pairs"),
            ("/v1/rerank", {"model": "colpali", "query": "q", "documents": ["not a data uri"]},
             "documents[0]: the image is not valid base64")):
        r = httpx.post(url + path, json=body, timeout=30)
        assert r.status_code in (400, 422, 424) and said in r.text, (path, r.text)


def test_gateway_token_vectors_of_queries_and_pages(url, ref, pages):
    from embtrt.kinds.pages.reference import encode_images, encode_queries

    tei = httpx.post(url + "/embed_all", json={"inputs": QUERIES[:2]}, timeout=60)
    assert tei.status_code == 200, tei.text
    _close([np.asarray(v, np.float32) for v in tei.json()], encode_queries(ref, QUERIES[:2]))
    page = httpx.post(url + "/pooling", json={"model": "colpali", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": _uri(pages[3])}}]}]}, timeout=60)
    assert page.status_code == 200, page.text
    _close([np.asarray(page.json()["data"][0]["data"], np.float32)], encode_images(ref, _pil(pages[3:4])))
    info = httpx.get(url + "/info", timeout=30).json()
    assert info["model_type"] == {"embedding": {"pooling": "multi-vector (page images)"}}
    bad = httpx.post(url + "/pooling", json={"model": "colpali", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/p.png"}}]}]}, timeout=30)
    assert bad.status_code == 400 and "not fetched" in bad.text
    assert httpx.get(url + "/health/ready", timeout=30).status_code == 200   # serving goes on


def test_verify_gates_the_served_model(server, folders, corpus):
    from embtrt.kinds.pages.measure import PagesMeasure

    rep = PagesMeasure.verify(server.grpc_url, "colpali", folders["colpali"], corpus[:60], under_load=True,
                              concurrency=4, log=lambda _: None)
    assert rep.passed, rep.failures
    assert rep.figures["gate"]["images"] == 16 and rep.figures["under_load"]["max_abs_diff"] <= 1e-4


def test_embed_and_the_embedding_client_name_the_page_client(server, pages, tmp_path):
    """A page-image retriever gives token vectors: `embtrt embed` and EmbeddingClient refuse it naming its client."""
    import subprocess
    import sys

    from embtrt.errors import ClientError
    from embtrt.serve.client import EmbeddingClient

    (tmp_path / "p.png").write_bytes(pages[0])
    for args in (["a query"], ["--image", str(tmp_path / "p.png")]):
        r = subprocess.run([sys.executable, "-m", "embtrt.cli", "embed", "--url", server.grpc_url, "--model", "colpali",
                            *args], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "PageImageClient" in r.stdout + r.stderr, r.stdout + r.stderr
    with pytest.raises(ClientError, match="page-image retriever") as e:
        with EmbeddingClient(server.grpc_url, "colpali") as c:
            c.embed(["a query"])
    assert "PageImageClient" in str(e.value.hint)


def test_bench_pages_served_and_in_process(server, folders, pages, tmp_path):
    """`embtrt bench --pages`: pages/s of the served model and of ColPaliForRetrieval in process, on the same pages."""
    import json
    import subprocess
    import sys

    for i, f in enumerate(pages):
        (tmp_path / f"p{i}.png").write_bytes(f)
    r = subprocess.run([sys.executable, "-m", "embtrt.cli", "bench", "--url", server.grpc_url, "--model", "colpali",
                        "--pages", str(tmp_path), "--reference", str(folders["colpali"]), "--concurrency", "1,4",
                        "--requests", "12", "--warmup", "2", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)["results"]
    assert [row["target"].split(":")[0] for row in rows] == ["triton", "triton", "inprocess"]
    assert all(row["errors"] == 0 and row["images_per_s"] > 0 for row in rows)
    assert rows[0]["requests"] == 12 and rows[2]["images_per_request"] == 8


def test_probe_and_k8s_take_a_page_image_retriever(server, repos, tmp_path):
    """`embtrt probe` (a query and the probe image through the front door, each finite) and `embtrt k8s` (one pool of the
    front door, a gateway in front) on the kind."""
    import subprocess
    import sys

    cli = [sys.executable, "-m", "embtrt.cli"]
    r = subprocess.run([*cli, "probe", "--url", server.grpc_url, "--model", "colpali"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([*cli, "k8s", str(repos["colpali"]), "--out", str(tmp_path / "k8s"), "--image", "localhost/pool:test",
                        "--server-python", "3.11"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    pools = sorted(p.name for p in (tmp_path / "k8s").glob("colpali-pool-*.yaml"))
    assert pools == ["colpali-pool-256.yaml"] and (tmp_path / "k8s" / "gateway.yaml").is_file()


@pytest.mark.slow
def test_tune_takes_a_page_image_retriever(repos, tmp_path):
    """`embtrt tune` on the front door, one query per request (its trial); the applied winner passes check and serves."""
    from embtrt.kinds.pages.serve import PageImageClient
    from embtrt.measure.tune import TuneSpec, tune
    from embtrt.repository.check import check_repository

    doc = tune(TuneSpec(repos["colpali"], slo_p99_ms=10000, concurrency=(2,), budget_min=1.0, requests=12, warmup=2,
                        knobs=("front.max_queue_delay_us",), apply_to=tmp_path / "tuned"), log=lambda m: None)
    assert len(doc["trials"]) >= 2 and all(t["results"]["2"]["req_per_s"] > 0 for t in doc["trials"])
    assert check_repository(tmp_path / "tuned").passed
    with start_server(tmp_path / "tuned", tmp_path) as srv, PageImageClient(srv.grpc_url, "colpali") as c:
        assert len(c.encode_queries(["a query"])) == 1


def test_one_command_serves_a_page_folder_on_its_own_target(folders, ref, pages, tmp_path):
    """`embtrt up FOLDER` with no --target (auto): a page-image retriever builds for python-torch, its own target (python-ort,
    up's default for the other kinds, is refused by its build), and its endpoint ranks pages with Cohere's SDK;
    `embtrt build --target auto` picks the same."""
    import signal

    import cohere

    from embtrt.export.spec_options import spec_from_options
    from embtrt.kinds.pages.reference import encode_images, encode_queries, score
    from test_up import Up

    assert spec_from_options(folders["colpali"], tmp_path / "r").target == "python-torch"
    up = Up(folders["colpali"], tmp_path)
    try:
        assert "(python-torch)" in up.text()
        want = score(ref, encode_queries(ref, QUERIES[1:2]), encode_images(ref, _pil(pages[:3])))[0]
        got = cohere.ClientV2(api_key="unused", base_url=f"http://127.0.0.1:{up.port}").rerank(
            model="colpali", query=QUERIES[1], documents=[_uri(f) for f in pages[:3]])
        assert max(abs(r.relevance_score - want[r.index]) for r in got.results) <= TOL
        assert up.stop(signal.SIGINT) == 0
    finally:
        up.kill()
