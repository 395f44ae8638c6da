"""The VLM embedder's gate (embtrt.kinds.vlm.reference_gate), without a server: texts, images and fused inputs each
against the reference's vectors by the pooled image gate's bounds (fp32 0.99999 everywhere; reduced: 0.999 texts,
0.995 images and fused inputs, retrieval both ways by overlap), the bounds fixed and never the error measured."""

import numpy as np

from embtrt.kinds.vlm.reference_gate import judge


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _vectors(seed=0, n=16, dim=64):
    rng = np.random.default_rng(seed)
    return {g: _unit(rng.normal(size=(n, dim))) for g in ("texts", "images", "fused")}


def _moved(want, group, angle):
    """`want` with every vector of `group` turned by `angle` radians (cosine = cos(angle) exactly)."""
    rng = np.random.default_rng(5)
    got = {k: v.copy() for k, v in want.items()}
    v = want[group].astype(np.float64)
    r = rng.normal(size=v.shape)
    r = r - (r * v).sum(1, keepdims=True) * v
    r /= np.linalg.norm(r, axis=1, keepdims=True)
    got[group] = (np.cos(angle) * v + np.sin(angle) * r).astype(np.float32)
    return got


def test_equal_vectors_pass_at_fp32_with_every_figure():
    want = _vectors()
    v = judge({k: x.copy() for k, x in want.items()}, want)
    assert v.passed, v.failures
    f = v.figures
    assert min(f["texts_cosine_min"], f["images_cosine_min"], f["fused_cosine_min"]) > 0.99999
    assert f["texts"] == f["images"] == f["fused"] == 16 and f["text_to_image_identical"] == 16


def test_a_fused_input_off_by_cosine_0_998_fails_fp32_and_passes_reduced_and_0_99_fails_both():
    want = _vectors()
    near = _moved(want, "fused", np.arccos(0.998))
    assert not judge(near, want).passed
    assert judge(near, want, "bf16").passed, judge(near, want, "bf16").failures
    far = _moved(want, "fused", np.arccos(0.99))
    bad = judge(far, want, "bf16")
    assert not bad.passed and any(x.startswith("fused: cosine min 0.99") for x in bad.failures), bad.failures


def test_texts_are_held_to_0_999_reduced_where_images_get_0_995():
    want = _vectors()
    texts = judge(_moved(want, "texts", np.arccos(0.997)), want, "fp16")
    images = judge(_moved(want, "images", np.arccos(0.997)), want, "fp16")
    assert any(x.startswith("texts: cosine min") for x in texts.failures), texts.failures
    assert not any(x.startswith("images: cosine min") for x in images.failures), images.failures


def test_a_shape_mismatch_fails_naming_the_group():
    want = _vectors()
    got = {**want, "images": want["images"][:15]}
    v = judge(got, want)
    assert not v.passed and any("images: shape (15, 64)" in x for x in v.failures)
