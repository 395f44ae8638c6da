"""The text-and-image gate's judgement (#53, #68), without a server. Its retrieval check is reference.ranking's
rule with a constant tie: a served order may swap two items only where their reference cosines are closer than
2e-5 (twice the fp32 text-image cosine bound), never by a tie taken from the error measured, which let any
order through; reduced precision asks a top-10 overlap >= 0.98 and an NDCG@10 regression <= 0.005 both ways."""

import numpy as np

from embtrt.kinds.multimodal.reference_gate import SCORE_TIE, judge, retrieval


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _tight_cluster(seed=0, n=40, dim=64, spread=0.02, noise=0.003):
    """#68's case: texts exact, `n` images in a tight cluster, each served image close to its reference."""
    rng = np.random.default_rng(seed)
    text = rng.normal(size=(n, dim))
    centre = rng.normal(size=dim)
    image = _unit(centre + spread * rng.normal(size=(n, dim)) * np.linalg.norm(centre) / np.sqrt(dim))
    got = _unit(image + noise * rng.normal(size=image.shape) / np.sqrt(dim))
    return text, image, got


def test_a_served_image_ranking_that_moved_fails_the_reduced_gate_however_close_each_vector_is():
    text, image, got = _tight_cluster()
    per_image = (got * image).sum(1)
    assert per_image.min() > 0.99995                          # each served image passes fp16's tower bound (0.995)
    tokens = np.full(len(text), 5)
    v = judge(text, text.copy(), tokens, (32, 77), image, got.astype(np.float32), precision="fp16")
    f = v.figures
    assert f["text_to_image_overlap"] < 0.98 and not v.passed, (f["text_to_image_overlap"], v.failures)
    assert f["text_to_image_identical"] < len(text)          # "identical" counts exact top 10s only
    assert any(x.startswith("text -> image retrieval: top-10 overlap") for x in v.failures), v.failures
    fp32 = judge(text, text.copy(), tokens, (32, 77), image, got.astype(np.float32))
    assert not fp32.passed and any("text -> image retrieval: top 10 differs beyond the tie" in x for x in fp32.failures)


def test_a_true_fp32_near_tie_passes_and_a_swap_beyond_the_tie_fails():
    rng = np.random.default_rng(1)
    q, d = rng.normal(size=(4, 8)), rng.normal(size=(12, 8))
    d[5] = d[4] + 1e-7 * rng.normal(size=8)                # a near-tie in every row (cosines ~1e-7 apart)
    got_d = d.copy()
    got_d[[4, 5]] = d[[5, 4]]                              # served: the two swapped
    a = retrieval(q, got_d, q, d, 10)
    assert a.within_ties == 4 and a.passes("fp32")
    far = d.copy()
    far[[0, 1]] = d[[1, 0]]                                # two unrelated images swapped: far beyond the tie
    b = retrieval(q, far, q, d, 10)
    assert b.within_ties < 4 and not b.passes("fp32") and SCORE_TIE == 2e-5


def test_the_gate_passes_the_reference_and_fails_each_tower_on_its_own():
    rng = np.random.default_rng(0)
    text, image = rng.normal(size=(20, 16)).astype(np.float32), rng.normal(size=(8, 16)).astype(np.float32)
    tokens = rng.integers(1, 77, 20)
    ok = judge(text, text.copy(), tokens, (32, 77), image, image.copy())
    assert ok.passed and ok.figures["text_to_image_identical"] == 20 and ok.figures["image_to_text_identical"] == 8
    assert ok.figures["score_error"] == 0.0
    bad_image = image.copy()
    bad_image[3] += 0.5 * np.linalg.norm(bad_image[3]) / 4
    v = judge(text, text.copy(), tokens, (32, 77), image, bad_image)
    assert not v.passed and any(f.startswith("images: cosine min") for f in v.failures)
    assert not any(f.startswith("texts in bucket") for f in v.failures)
    reduced = judge(text, text + 1e-4 * rng.normal(size=text.shape).astype(np.float32), tokens, (32, 77), image,
                    image.copy(), precision="bf16")
    assert reduced.passed and reduced.figures["precision"] == "bf16"
