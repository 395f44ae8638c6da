"""The text-and-image gate's judgement (#53), without a server: its retrieval check accepts a served order that
swaps two items only where their reference cosines are closer than twice the row's measured score error (an
exact-order rule flaked on the tiny model's near-ties: one row of 185 once), refuses any other swap, a
better item left out or swaps that add up, and each tower's cosine bound decides on its own."""

import numpy as np

from embtrt.kinds.multimodal.reference_gate import judge, ranks_within, retrieval


def test_a_served_order_ranks_as_the_reference_up_to_ties_only():
    want = np.array([0.9, 0.5, 0.5 + 1e-6, 0.1, 0.3])
    tie = 2e-6
    assert ranks_within([0, 2, 1], want, 3, tie)          # the reference's own order
    assert ranks_within([0, 1, 2], want, 3, tie)          # a swap of a tie (1e-6 apart)
    assert not ranks_within([0, 1, 4], want, 3, tie)      # a wrong third item
    assert not ranks_within([0, 1, 2], np.array([0.9, 0.5, 0.5 + 1e-3, 0.1]), 3, tie)   # items 1e-3 apart
    assert ranks_within([0, 1, 2], np.array([0.9, 0.5, 0.2, 0.2 + 1e-6]), 3, tie)   # a tie at the k-th place
    assert not ranks_within([1, 2, 3], np.array([0.9, 0.5, 0.5, 0.5]), 3, tie)      # the best item left out
    steps = 1.0 - 1.5e-6 * np.arange(10)                   # each neighbour within the tie, the ends 1.35e-5 apart
    assert not ranks_within(list(range(9, -1, -1)), steps, 10, tie)   # reversed: the swaps add up


def test_the_tie_is_the_rows_measured_score_error():
    rng = np.random.default_rng(1)
    q, d = rng.normal(size=(4, 8)), rng.normal(size=(12, 8))
    d[5] = d[4] + 1e-7 * rng.normal(size=8)                # a near-tie in every row
    got_d = d.copy()
    got_d[[4, 5]] = d[[5, 4]]                              # served: the two swapped (their noise explains it)
    assert retrieval(q, got_d, q, d, 10)[0] == 4
    far = d.copy()
    far[[0, 1]] = d[[1, 0]]   # two vectors swapped: a score error as large as their gap; the cosine bound refuses it
    v = judge(q, q.copy(), np.full(4, 5), (32, 77), d, far)
    assert not v.passed and any(f.startswith("images: cosine min") for f in v.failures)


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
