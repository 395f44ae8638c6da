"""What `embtrt verify --against` says of two deployments' identities (kinds/embedder/measure.identity_diff)."""

from embtrt.kinds.embedder.measure import identity_diff

BASE = {"embtrt.model": "a", "embtrt.model_sha256": "h", "embtrt.pooling": "mean", "embtrt.normalize": "true",
        "embtrt.dim": "384", "embtrt.max_seq_length": "256", "embtrt.precision": "fp32", "embtrt.target": "python-ort",
        "embtrt.backend_profile": "python-ort:cpu:fp32"}


def test_same_backend_under_another_name_is_not_called_a_different_backend():
    out = identity_diff(BASE, {**BASE, "embtrt.model": "b"}, "A", "B")
    assert out[-1].startswith("the same model, backend and precision under other names")
    assert not any("different backends" in line for line in out)


def test_another_precision_is_a_different_backend_and_other_weights_a_different_model():
    assert identity_diff(BASE, {**BASE, "embtrt.precision": "bf16"}, "A", "B")[-1].startswith(
        "same model on different backends or precisions")
    assert identity_diff(BASE, {**BASE, "embtrt.model_sha256": "x"}, "A", "B")[-1].startswith("different models")
    assert identity_diff(BASE, dict(BASE), "A", "B") == []
