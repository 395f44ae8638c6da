"""The tiny CLIP-style model the image kind's tests will build (#53): sentence-transformers loads it as a
two-modality model and tells texts and images apart (seeded, not collapsed)."""

import numpy as np


def test_the_tiny_clip_encodes_texts_and_images_apart(tmp_path):
    from PIL import Image
    from sentence_transformers import SentenceTransformer

    from tiny_images import make_clip

    st = SentenceTransformer(str(make_clip(tmp_path / "clip")), device="cpu")
    assert st.modalities == ["text", "image"]
    rng = np.random.default_rng(0)
    imgs = [Image.fromarray((rng.random((300, 200, 3)) * 255).astype(np.uint8)) for _ in range(3)]
    t, i = st.encode(["a photo of a cat", "a dog on grass", "text"]), st.encode(imgs)
    assert t.shape == i.shape == (3, 16)
    for v in (t, i):
        cos = (v @ v.T) / np.outer(np.linalg.norm(v, axis=1), np.linalg.norm(v, axis=1))
        assert cos[~np.eye(3, dtype=bool)].max() < 0.999   # different inputs, different vectors
