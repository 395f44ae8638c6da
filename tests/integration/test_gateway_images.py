"""Text-and-image embedders behind `embtrt gateway` (#53), each request shape with its anchor's own client or
body: NIM's /v1/embeddings with `modality` (batch-wide or per input: texts and images mixed, vectors in input
order) through the openai client, infinity's /embeddings with `modality: "image"`, Cohere's /v2/embed `images`
and `inputs` and /v1/embed `images` through Cohere's SDK; equal to SentenceTransformer.encode of the same
texts and images (data URIs). Bad and hostile input is a 400 naming the item (a fused text_image input, an
http(s) URL, bad base64, not an image, an image to a text-only embedder) while serving goes on."""

import httpx
import numpy as np
import pytest

from embtrt.kinds.multimodal.reference import data_uri
from test_gateway import gateway
from tiny_images import FORMS, encoded_form

pytestmark = pytest.mark.integration
TOL = 1e-4


@pytest.fixture(scope="module")
def url(clip_repos, minilm_repo, clip_server, tmp_path_factory):
    with gateway(clip_repos["clip"], tmp_path_factory.mktemp("gw-img") / "gw.log", str(minilm_repo), "--triton",
                 clip_server.grpc_url, "--default-model", "clip") as u:
        yield u


@pytest.fixture(scope="module")
def ref(clips):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(clips["clip"]), device="cpu")


@pytest.fixture(scope="module")
def uris():
    return [data_uri(encoded_form(k), "png") for k in FORMS[:6]]


def _vecs(data) -> np.ndarray:
    return np.array([d["embedding"] for d in sorted(data, key=lambda d: d["index"])], dtype=np.float32)


def test_nim_and_openai_bodies_with_modality(url, ref, uris):
    from openai import OpenAI

    c = OpenAI(base_url=url + "/v1", api_key="unused")
    want_i = ref.encode(uris)
    got = c.embeddings.create(model="clip", input=uris, extra_body={"modality": "image"})
    assert np.abs(_vecs([d.model_dump() for d in got.data]) - want_i).max() <= TOL
    assert got.usage.prompt_tokens == 0   # images take no text tokens
    texts = ["a cat", "two dogs playing"]
    mixed = [texts[0], uris[0], texts[1], uris[1]]   # NIM: one modality per input, vectors in input order
    got = c.embeddings.create(model="clip", input=mixed, extra_body={"modality": ["text", "image", "text", "image"]})
    want = np.stack([*ref.encode(texts[:1]), want_i[0], *ref.encode(texts[1:]), want_i[1]])
    assert np.abs(_vecs([d.model_dump() for d in got.data]) - want).max() <= TOL
    assert got.usage.prompt_tokens > 0
    nim = c.embeddings.create(model="clip", input=uris[:2], extra_body={"modality": "image", "input_type": "passage"})
    assert np.abs(_vecs([d.model_dump() for d in nim.data]) - want_i[:2]).max() <= TOL   # NIM always sends input_type
    plain = c.embeddings.create(model="clip", input=[uris[0]])   # no modality: a text, never guessed
    as_text = ref.encode([{"text": uris[0]}])[0]   # (sentence-transformers would guess an image from the string)
    assert np.abs(np.array(plain.data[0].embedding) - as_text).max() <= TOL
    assert np.abs(as_text - want_i[0]).max() > 0.1


def test_infinity_embeddings_with_modality_image(url, ref, uris):
    r = httpx.post(url + "/embeddings", json={"model": "clip", "input": uris[:3], "modality": "image"}, timeout=60)
    assert r.status_code == 200, r.text
    assert np.abs(_vecs(r.json()["data"]) - ref.encode(uris[:3])).max() <= TOL


def test_cohere_images_and_inputs_through_its_sdk(url, ref, uris):
    import cohere

    v2 = cohere.ClientV2(api_key="unused", base_url=url)
    got = v2.embed(model="clip", input_type="image", embedding_types=["float"], images=uris[:2])
    assert np.abs(np.array(got.embeddings.float_) - ref.encode(uris[:2])).max() <= TOL
    inputs = [{"content": [{"type": "image_url", "image_url": {"url": uris[2]}}]},
              {"content": [{"type": "text", "text": "a red square"}]}]
    got = v2.embed(model="clip", input_type="search_document", embedding_types=["float", "ubinary"], inputs=inputs)
    want = np.stack([ref.encode(uris[2:3])[0], ref.encode(["a red square"])[0]])
    assert np.abs(np.array(got.embeddings.float_) - want).max() <= TOL
    from sentence_transformers.util.quantization import quantize_embeddings

    assert np.array_equal(np.array(got.embeddings.ubinary, dtype=np.uint8), quantize_embeddings(want, "ubinary"))
    v1 = cohere.Client(api_key="unused", base_url=url).embed(model="clip", input_type="image", images=uris[3:5])
    assert np.abs(np.array(v1.embeddings) - ref.encode(uris[3:5])).max() <= TOL


def test_bad_and_hostile_image_requests_are_400s_naming_the_item(url, uris):
    bad = {
        "fused": ({"model": "clip", "input": ["a cat " + uris[0]], "modality": "text_image"}, "modality text_image: .*VLM"),
        "url": ({"model": "clip", "input": [uris[0], "https://example.com/cat.png"], "modality": "image"},
                "input\\[1\\]: image URLs are not fetched"),
        "base64": ({"model": "clip", "input": ["data:image/png;base64,@@@"], "modality": "image"},
                   "input\\[0\\]: the image is not valid base64"),
        "not an image": ({"model": "clip", "input": [uris[0], data_uri(b"hello there", "png")], "modality": "image"},
                         "input\\[1\\]: not an image"),
        "text-only model": ({"model": "all_minilm_l6_v2", "input": [uris[0]], "modality": "image"},
                            "input\\[0\\] is an image, but all_minilm_l6_v2 is an embedder: it embeds texts only"),
        "modality count": ({"model": "clip", "input": [uris[0], uris[1], "x"], "modality": ["image", "text"]},
                           "modality has 2 values for 3 inputs"),
        "modality value": ({"model": "clip", "input": [uris[0]], "modality": "video"}, "modality must be one of"),
        "long text after an image": ({"model": "clip", "input": [uris[0], "x" * (1 << 20 | 1)], "modality": ["image", "text"]},
                                     "input\\[1\\] is 1048577 bytes of UTF-8"),
    }
    for name, (body, needle) in bad.items():
        r = httpx.post(url + "/v1/embeddings", json=body, timeout=60)
        assert r.status_code == 400, (name, r.text)
        assert __import__("re").search(needle, r.json()["error"]["message"]), (name, r.text)
    mixed = {"model": "clip", "embedding_types": ["float"], "input_type": "search_document",
             "inputs": [{"content": [{"type": "text", "text": "a cat"}, {"type": "image_url", "image_url": {"url": uris[0]}}]}]}
    r = httpx.post(url + "/v2/embed", json=mixed, timeout=60)
    assert r.status_code == 400 and "inputs[0] has 2 content parts" in r.text and "VLM" in r.text
    r = httpx.post(url + "/v1/embed", json={"model": "clip", "input_type": "image", "texts": ["a cat"]}, timeout=60)
    assert r.status_code == 400 and "input_type image is for images" in r.text
    ok = httpx.post(url + "/v1/embeddings", json={"model": "clip", "input": uris[:1], "modality": "image"}, timeout=60)
    assert ok.status_code == 200   # serving goes on
    ready = httpx.get(url + "/health/ready", timeout=30)   # the probe embeds a text and an image
    assert ready.status_code == 200, ready.text
    models = httpx.get(url + "/v1/models", timeout=10).json()["data"]
    clip = next(m for m in models if m["id"] == "clip")
    assert clip["kind"] == "multimodal" and clip["modalities"] == ["text", "image"]


def test_tei_info_describes_a_text_and_image_model(url):
    """GET /info (TEI's, what Hugging Face's clients read first) on a text-and-image model: its type and limits,
    not a 500 (its gateway class had no tei_type; #68 item 6)."""
    r = httpx.get(url + "/info", timeout=30)
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["model_id"] == "clip" and info["model_type"] == {"embedding": {"pooling": "projection"}}   # as its manifest
    assert info["max_input_length"] == 77 and info["model_dtype"] == "fp32"
