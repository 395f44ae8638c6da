"""Text-and-image embedders (#53): a CLIP-style sentence-transformers folder (and the old CLIPModel-module
layout) builds on every CPU target, passes its gate, and serves over gRPC on a real tritonserver what
SentenceTransformer.encode gives in process for the same texts and the same images (as data URIs): every
image form the preprocessing covers, options, retrieval across the towers; hostile images refused naming
their row while serving goes on; `embtrt verify` (the gate, under load) on the served model."""

import numpy as np
import pytest

from conftest import start_server
from embtrt.errors import ClientError, ParityError, SpecError
from embtrt.export import build
from embtrt.export.spec_options import spec_from_options
from embtrt.kinds.multimodal.reference import data_uri, gate_images
from embtrt.kinds.multimodal.serve import ImageEmbeddingClient
from embtrt.repository.manifest import read_manifest
from tiny_images import FORMS, encoded_form, pattern, png_header_only

pytestmark = pytest.mark.integration
COS = 0.99999


@pytest.fixture(scope="module")
def ref(clips):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(clips["clip"]), device="cpu")


@pytest.fixture(scope="module")
def images():
    """Every preprocessing form (EXIF-rotated JPEG, PNG, WebP, an animated GIF, grayscale, RGBA, palette with
    transparency, 16-bit, smaller than the crop, tall) and six seeded images of assorted sizes and formats."""
    return [encoded_form(k) for k in FORMS] + [f for f, _ in gate_images(6, seed=99)]


def _cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _same_ranking(got_q, got_d, want_q, want_d):
    """Every row's served top 10 ranks as the reference's cosines up to ties closer than 2e-5, a constant (the
    gate's fp32 rule, reference.ranking)."""
    from embtrt.kinds.multimodal.reference_gate import retrieval

    agree = retrieval(got_q, got_d, want_q, want_d)
    return agree.queries == len(want_q) and agree.passes("fp32")


def test_detection_and_the_built_manifests(clips, clip_repos):
    from embtrt.reference.detect import detect

    def detect_kind(folder):
        found = detect(folder)
        return found.kind.name, found.why

    for folder in clips.values():
        assert detect_kind(folder)[0] == "multimodal"
    for key, repo in clip_repos.items():
        m = read_manifest(repo)
        parity = m.extra["parity"]
        assert m.kind == "multimodal" and parity["passed"], key
        assert parity["image_cosine_min"] >= COS and parity["text_cosine_min"] >= COS
        assert parity["image_to_text_within_ties"] == parity["images"] == 16
        assert parity["text_to_image_within_ties"] == parity["texts"] and parity["score_error"] <= 1e-5
    old = clip_repos["clip_old_torch"]
    assert read_manifest(old).extra["spec"]["hf_subdir"] == "0_CLIPModel"
    assert (old / "clip_old_torch" / "1" / "hf" / "model.safetensors").is_file()   # the module folder's weights
    ort = clip_repos["clip"] / "clip" / "1"
    assert (ort / "image.onnx").is_file() and (ort / "image_processor.json").is_file()
    assert "pillow" in read_manifest(clip_repos["clip"]).bundle["packages"]   # the front door decodes images
    config = (clip_repos["clip"] / "clip" / "config.pbtxt").read_text()
    assert 'name: "sample_image"' in config and (clip_repos["clip"] / "clip" / "warmup" / "sample_image").is_file()


def test_served_texts_and_images_equal_sentence_transformers(clip_server, ref, images, corpus, tmp_path):
    texts = [t for t in corpus if len(t) < 200][:20] + ["Hello, world!", "a photo of a cat " * 30]   # one cut at 77
    want_t, want_i = ref.encode(texts), ref.encode([data_uri(x, "png") for x in images])
    for model in ("clip", "clip_old_torch"):
        with ImageEmbeddingClient(clip_server.grpc_url, model) as c:
            got_t, got_i = c.embed(texts), c.embed_images(images)
            assert _cos(got_t, want_t).min() >= COS and np.abs(got_t - want_t).max() <= 1e-4, model
            assert _cos(got_i, want_i).min() >= COS and np.abs(got_i - want_i).max() <= 1e-4, model
            assert _same_ranking(got_t, got_i, want_t, want_i) and _same_ranking(got_i, got_t, want_i, want_t)
    from embtrt.serve.client import EmbeddingClient

    with EmbeddingClient(clip_server.grpc_url, "clip") as e:   # texts in, a pooled vector out: the text client works too
        assert np.abs(e.embed(texts) - want_t).max() <= 1e-4
    path = tmp_path / "cat.jpg"
    path.write_bytes(images[0])
    with ImageEmbeddingClient(clip_server.grpc_url, "clip", batch_size=3) as c:   # a path, a data URI, bytes
        got = c.embed_images([path, data_uri(images[1], "png"), images[2], *images[3:8]])
        assert np.abs(got - want_i[:8]).max() <= 1e-4
        narrow = c.embed_images(images[:3], dimensions=8)
        assert np.abs(narrow - want_i[:3, :8]).max() <= 1e-4   # sentence-transformers' truncate_dim
        from sentence_transformers.util.quantization import quantize_embeddings

        packed = c.embed_images(images[:3], embedding_type="ubinary")
        assert np.array_equal(packed, quantize_embeddings(want_i[:3], "ubinary"))


def test_hostile_images_are_refused_naming_their_row_and_serving_goes_on(clip_server, images):
    import io

    import tritonclient.grpc as grpcclient
    from PIL import Image

    from embtrt.serve.wire import text_input

    tiff, thin = io.BytesIO(), io.BytesIO()
    Image.fromarray(pattern(20, 20, 1)).save(tiff, "TIFF")
    Image.fromarray(pattern(20000, 1, 2)).save(thin, "PNG")
    cases = {b"plain text, not an image": "row 1: not an image", images[1][:300]: "row 1: the image file is truncated",
             tiff.getvalue(): "row 1: image format TIFF is not decoded",
             png_header_only(50_000, 50_000): "row 1: the image.s header claims more pixels than Pillow opens",
             png_header_only(8000, 8000): "row 1: the image is 8000 x 8000 pixels, over the limit of 36000000",
             thin.getvalue(): "row 1: .*resized to 224 on its short side",
             b"https://example.com/cat.png": "row 1: not an image", b"": "row 1: an empty image",
             b"\xff\xd8" + b"\x00" * (9 << 20): "row 1: the image file is 9437186 bytes, over the limit of 8388608"}
    c = grpcclient.InferenceServerClient(clip_server.grpc_url)
    try:
        for data, needle in cases.items():
            with pytest.raises(Exception, match=f"StatusCode.INVALID_ARGUMENT.*{needle}"):
                c.infer("clip", [text_input([images[0], data], "IMAGE")])
        both = [text_input(["a cat"]), text_input([images[0]], "IMAGE")]
        with pytest.raises(Exception, match="INVALID_ARGUMENT.*TEXT or IMAGE, not both"):
            c.infer("clip", both)
        with pytest.raises(Exception, match="INVALID_ARGUMENT"):   # an image to a text-only embedder
            c.infer("all_minilm_l6_v2", [text_input([images[0]], "IMAGE")])
        ok = c.infer("clip", [text_input(images[:2], "IMAGE")]).as_numpy("EMBEDDING")
        assert ok.shape == (2, 16) and np.isfinite(ok).all()   # served after every refusal
        from embtrt.serve.probe import probe

        assert probe(clip_server.grpc_url, "clip").ok   # `embtrt probe`: a text, then the probe image alone
    finally:
        c.close()
    with pytest.raises(ClientError, match="not fetched"):
        ImageEmbeddingClient(clip_server.grpc_url, "clip").embed_images(["http://example.com/cat.png"])
    with pytest.raises(ClientError, match="is not a text-and-image embedder"):
        ImageEmbeddingClient(clip_server.grpc_url, "all_minilm_l6_v2").embed(["a cat"])


def test_verify_tune_bench_and_the_cli_on_the_served_model(clip_server, clips, corpus, images, tmp_path):
    import json
    import subprocess
    import sys

    from embtrt.kinds.multimodal.measure import MultimodalMeasure, verify_multimodal
    from embtrt.kinds.multimodal.measure_bench import bench_images

    rep = verify_multimodal(clip_server.grpc_url, "clip", clips["clip"], corpus[:40], under_load=True, concurrency=8,
                            log=lambda _m: None)
    assert rep.passed, rep.failures
    assert rep.figures["gate"]["image_cosine_min"] >= COS and rep.figures["under_load"]["failed"] == 0
    other = verify_multimodal(clip_server.grpc_url, "clip", None, corpus[:20], against=(clip_server.grpc_url, "clip_old_torch"),
                              log=lambda _m: None)
    assert other.passed, other.failures
    load = MultimodalMeasure(clip_server.grpc_url, "clip").trial(corpus, 4, 24, 4)   # `embtrt tune`'s trial
    assert load.ok == 24 and not load.failures
    rows = bench_images(clip_server.grpc_url, ["clip"], images, (1, 4), 2, 10, 2, clips["clip"])
    assert [(r["target"].split("@")[0], r["concurrency"]) for r in rows] == [
        ("triton:clip", 1), ("triton:clip", 4), ("inprocess:SentenceTransformer.encode(images as data URIs, batch 32, fp32)", 1)]
    assert all(r["errors"] == 0 and r["images_per_s"] > 0 for r in rows)
    (tmp_path / "a.png").write_bytes(images[1])
    out = subprocess.run([sys.executable, "-m", "embtrt.cli", "embed", "a cat", "--image", str(tmp_path / "a.png"),
                          "--model", "clip", "--url", clip_server.grpc_url, "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = np.array(json.loads(out.stdout)["embeddings"])
    with ImageEmbeddingClient(clip_server.grpc_url, "clip") as c:
        assert np.abs(got - np.concatenate([c.embed(["a cat"]), c.embed_images([images[1]])])).max() <= 1e-5
    out = subprocess.run([sys.executable, "-m", "embtrt.cli", "embed", "--image", str(tmp_path / "a.png"), "--model",
                          "all_minilm_l6_v2", "--url", clip_server.grpc_url], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "takes no images" in out.stderr


def test_reduced_precision_ships_only_behind_the_reduced_gate_and_tensorrt_is_refused(clips, corpus, tmp_path):
    """(The other CPU targets are built, served and compared in test_kind_targets_served.py.)"""
    import json

    half = tmp_path / "corpus.json"
    half.write_text(json.dumps(corpus[::4]))
    # reduced precision ships only behind the reduced gate: the tiny model's int8 text tower moves its vectors past
    # the text bound (0.999), and image -> text retrieval with them; refused, or recorded as refused when allowed
    with pytest.raises(ParityError, match="int8 text-and-image embedder fails the gate: texts in bucket"):
        build(spec_from_options(clips["clip"], tmp_path / "int8", name="clip_i", precision="int8"), corpus=half,
              log=lambda _m: None)
    build(spec_from_options(clips["clip"], tmp_path / "int8b", name="clip_i", precision="int8", allow_mismatch=True),
          corpus=half, log=lambda _m: None)
    parity = read_manifest(tmp_path / "int8b").extra["parity"]
    assert not parity["passed"] and parity["allowed_mismatch"] and parity["image_cosine_min"] >= 0.995   # fp32 images
    # served, `embtrt verify` judges it by the reduced gate: its image -> text ranking (overlap under 0.98) fails it,
    # and "identical" counts only the rows whose top 10 is the reference's exactly
    from embtrt.kinds.multimodal.measure import verify_multimodal

    (tmp_path / "srv").mkdir()
    with start_server(tmp_path / "int8b", tmp_path / "srv") as srv:
        rep = verify_multimodal(srv.grpc_url, "clip_i", clips["clip"], corpus[::4], log=lambda _m: None)
    gate = rep.figures["gate"]
    assert not rep.passed and gate["precision"] == "int8", gate
    assert any(f.startswith("texts in bucket") for f in rep.failures), rep.failures   # int8 texts: cosine < 0.999
    # the retrieval rule as the reduced gate states it, whichever way this run's figures fall: ONNX Runtime's
    # dynamic int8 scales each batch by its own range, so the served vectors, and the overlaps (0.94-0.99 seen),
    # move with the batches Triton formed
    moved = 0
    for name, key, rows in (("text -> image", "text_to_image", gate["texts"]), ("image -> text", "image_to_text", gate["images"])):
        fails = gate[f"{key}_overlap"] < 0.98 or gate[f"{key}_ndcg_regression"] > 0.005
        assert any(f.startswith(f"{name} retrieval: ") for f in rep.failures) == fails, (key, gate, rep.failures)
        if gate[f"{key}_overlap"] < 1.0:   # a row whose top 10 moved is not counted identical
            assert gate[f"{key}_identical"] < rows, (key, gate)
            moved += 1
    assert moved, gate   # the int8 tower moved some ranking: the checks above were exercised
    with pytest.raises(SpecError, match="tensorrt"):
        build(spec_from_options(clips["clip"], tmp_path / "trt", name="clip_t", target="tensorrt"), corpus=half,
              log=lambda _m: None)
