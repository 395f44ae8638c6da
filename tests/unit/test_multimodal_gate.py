"""The text-and-image gate's judgement (#53), without a server: its retrieval check accepts a served order that
swaps two items only where their reference cosines tie within 2e-5 (an exact-order rule flaked on the tiny
model's near-ties: one row of 185 once), refuses any other swap or a wrong item, and each tower's cosine
bound decides on its own."""

import numpy as np

from embtrt.kinds.multimodal.reference_gate import judge, ranks_within


def test_a_served_order_ranks_as_the_reference_up_to_ties_only():
    want = np.array([0.9, 0.5, 0.5 + 1e-6, 0.1, 0.3])
    assert ranks_within([0, 2, 1], want, 3)          # the reference's own order
    assert ranks_within([0, 1, 2], want, 3)          # a swap of a tie (1e-6 apart)
    assert not ranks_within([0, 1, 4], want, 3)      # a wrong third item
    gap = np.array([0.9, 0.5, 0.5 + 1e-3, 0.1])
    assert not ranks_within([0, 1, 2], gap, 3)       # a swap of items 1e-3 apart
    tied_edge = np.array([0.9, 0.5, 0.2, 0.2 + 1e-6])
    assert ranks_within([0, 1, 2], tied_edge, 3)     # a tie at the k-th place: either item


def test_the_gate_passes_the_reference_and_fails_each_tower_on_its_own():
    rng = np.random.default_rng(0)
    text, image = rng.normal(size=(20, 16)).astype(np.float32), rng.normal(size=(8, 16)).astype(np.float32)
    tokens = rng.integers(1, 77, 20)
    ok = judge(text, text.copy(), tokens, (32, 77), image, image.copy())
    assert ok.passed and ok.figures["text_to_image_identical"] == 20 and ok.figures["image_to_text_identical"] == 8
    bad_image = image.copy()
    bad_image[3] += 0.5 * np.linalg.norm(bad_image[3]) / 4
    v = judge(text, text.copy(), tokens, (32, 77), image, bad_image)
    assert not v.passed and any(f.startswith("images: cosine min") for f in v.failures)
    assert not any(f.startswith("texts in bucket") for f in v.failures)
    reduced = judge(text, text + 1e-4 * rng.normal(size=text.shape).astype(np.float32), tokens, (32, 77), image,
                    image.copy(), precision="bf16")
    assert reduced.passed and reduced.figures["precision"] == "bf16"
