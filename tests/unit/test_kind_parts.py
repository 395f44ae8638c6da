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
                   "multivector": "text + token vectors", "multimodal": "text or image + pooled",
                   "pages": "text or image + token vectors",    # #69 item 5: a new kind of existing parts
                   "vlm": "text, image or both + pooled"}
    assert kind_of("embedder").routing is POOLS and all(not k.length_pools for k in BY_NAME.values() if k.name != "embedder")


def test_what_the_layers_ask_is_what_each_kind_declared_before_its_parts():
    """The values the kinds declared one by one before #69 (bf2f470), now derived from their parts."""
    P = "embtrt.kinds.{}.reference_gate:plan_check"
    before = {   # inputs, probe output, image input, TensorRT plan check, TF32 at fp32, length pools
        "embedder": (("TEXT",), "EMBEDDING", "", "embtrt.export.onnx2trt:pooled_plan_check", True, True),
        "reranker": (("QUERY", "DOCUMENT"), "SCORES", "", P.format("reranker"), False, False),
        "sparse": (("TEXT",), "SPARSE_VALUES", "", P.format("sparse"), False, False),
        "classifier": (("TEXT",), "SCORES", "", P.format("classifier"), False, False),
        "multivector": (("TEXT",), "TOKEN_EMBEDDINGS", "", "", False, False),
        "multimodal": (("TEXT",), "EMBEDDING", "IMAGE", "", False, False),   # an image tower: no plans, pooled or not
    }
    assert {k.name: (k.inputs, k.probe_output, k.image_input, k.plan_check, k.tf32, k.length_pools)
            for k in BY_NAME.values() if k.name not in ("pages", "vlm")} == before
    # the page-image retriever (added after #69's parts) takes its values from its parts alone: the image input's, the
    # token-vector head's (an image input builds no plans)
    assert (kind_of("pages").input, kind_of("pages").heads) == (TEXT_OR_IMAGE, (TOKEN_VECTORS,))
    assert (kind_of("pages").probe_output, kind_of("pages").image_input, kind_of("pages").tensorrt) == \
        ("TOKEN_EMBEDDINGS", "IMAGE", False)
    assert kind_of("vlm").has(POOLED) and (kind_of("vlm").image_input, kind_of("vlm").tensorrt) == ("IMAGE", False)
    # the classifier's TensorRT plan is judged by its head's rule (each label's score and logit), not the reranker's
    assert kind_of("classifier").plan_check == LABEL_SCORES.plan_check != SCORES.plan_check == kind_of("reranker").plan_check
    assert kind_of("classifier").input is TEXT_OR_PAIR and TEXT_OR_PAIR.optional == ("TEXT_PAIR",)
    assert kind_of("sparse").input is TEXT_SIDES and TEXT_SIDES.prompts_per_side and not TEXT.prompts_per_side
    assert kind_of("multimodal").input is TEXT_OR_IMAGE and kind_of("multimodal").has(POOLED)


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
