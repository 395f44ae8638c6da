"""Kinds are compositions of parts (#69): an input, one or more heads and a routing. What the layers ask of a
kind that differs by part (the front door's inputs, the probe's output, the TensorRT plan check, TF32, the
encoder's parameters) is the part's, so a kind made of existing parts needs no new code in shared modules."""

from __future__ import annotations

from dataclasses import replace

from embtrt_backend.kinds import (BY_NAME, LABEL_SCORES, PAIR, POOLED, POOLS, SCORES, SPARSE_WEIGHTS, TEXT, TEXT_OR_IMAGE,
                                  TEXT_OR_PAIR, TEXT_SIDES, TOKEN_VECTORS, kind_of)


def test_the_registry_lists_each_kind_as_its_parts():
    got = {k.name: k.composition for k in BY_NAME.values()}
    assert got == {"embedder": "text + pooled, length pools", "reranker": "pair + scores",
                   "classifier": "text or pair + scores per label", "sparse": "text + sparse",
                   "multivector": "text + token vectors", "multimodal": "text or image + pooled"}
    assert kind_of("embedder").routing is POOLS and all(not k.length_pools for k in BY_NAME.values() if k.name != "embedder")


def test_what_the_layers_ask_is_the_parts():
    for k in BY_NAME.values():
        assert k.inputs == k.input.tensors and k.image_input == k.input.image and k.probe_output == k.heads[0].output
        assert k.plan_check == k.heads[0].plan_check and k.tf32 == all(h.tf32 for h in k.heads)
    # the classifier's TensorRT plan is judged by its head's rule (each label's score and logit), not the reranker's
    assert kind_of("classifier").plan_check == LABEL_SCORES.plan_check != SCORES.plan_check == kind_of("reranker").plan_check
    assert kind_of("classifier").input is TEXT_OR_PAIR and TEXT_OR_PAIR.optional == ("TEXT_PAIR",)
    assert kind_of("sparse").input is TEXT_SIDES and TEXT_SIDES.prompts_per_side and not TEXT.prompts_per_side
    assert kind_of("multimodal").image_input == "IMAGE" and TEXT_OR_IMAGE.tensors == ("TEXT",)


def test_a_new_composition_takes_its_rules_from_its_heads():
    """bge-m3's outputs as heads: no TF32 (the sparse and token-vector gates are absolute), no single plan check
    (several heads: none is built), the probe reads the first head's output."""
    hybrid = replace(kind_of("multivector"), name="hybrid", heads=(POOLED, SPARSE_WEIGHTS, TOKEN_VECTORS))
    assert (hybrid.tf32, hybrid.plan_check, hybrid.probe_output) == (False, "", "EMBEDDING")
    assert hybrid.has(SPARSE_WEIGHTS) and not kind_of("multivector").has(SPARSE_WEIGHTS)
    ranker = replace(kind_of("reranker"), name="ranker2", input=PAIR, heads=(SCORES,))
    assert ranker.pairs and ranker.plan_check == SCORES.plan_check and not ranker.tf32


def test_the_encoder_parameters_follow_the_heads():
    """The python-torch / bucket encoders' parameters (export.render): a token-vector head's layout, a sparse head's
    pooling; the default kind's encoders take none (a front door that names no kind is the default's)."""
    from embtrt.export.render import _kind_params
    from embtrt.export.spec import BuildSpec

    def params(kind: str) -> dict:
        spec = object.__new__(BuildSpec)   # the fields _kind_params reads, without a model folder
        for k, v in {"kind": kind, "multivector": (("mv_layout", "colbert"),), "splade_pooling": "max",
                     "activation": "relu", "active_dims_in_graph": False, "sparse_max_active_dims": 0}.items():
            object.__setattr__(spec, k, v)
        return dict(_kind_params(spec))

    assert params("embedder") == {}
    assert params("multivector") == {"kind": "multivector", "trim_padding": "false", "mv_layout": "colbert", "mv_normalize": "true"}
    assert params("sparse") == {"kind": "sparse", "splade_pooling": "max", "splade_activation": "relu"}
    assert params("reranker") == {"kind": "reranker"}
