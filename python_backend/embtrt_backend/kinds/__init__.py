"""The registry of kinds: every `Kind` by name, in the order messages list them.

Adding a kind is adding its module here (and its column in each layer that asks it: docs/kinds.md).
Only this package spells a kind's name; everything else names a kind through it.
"""

from __future__ import annotations

from .base import (DOOR, LABEL_SCORES, PAIR, POOLED, POOLS, SCORES, SPARSE_WEIGHTS, TEXT, TEXT_AND_IMAGE, TEXT_OR_IMAGE, TEXT_OR_PAIR,
                   TEXT_SIDES, TOKEN_VECTORS, Head, Input, Kind, Routing, Rule)
from .classifier import KIND as CLASSIFIER
from .embedder import KIND as EMBEDDER
from .multimodal import KIND as MULTIMODAL
from .multivector import KIND as MULTIVECTOR
from .pages import KIND as PAGES
from .reranker import KIND as RERANKER
from .sparse import KIND as SPARSE
from .vlm import KIND as VLM

KINDS: tuple[Kind, ...] = (EMBEDDER, RERANKER, SPARSE, CLASSIFIER, MULTIVECTOR, MULTIMODAL, PAGES, VLM)
BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
DEFAULT = EMBEDDER   # a manifest or front door from before kinds (schema 1 and 2) is an embedder's

# What kind a model folder is: the first of these rules that matches decides (--kind auto); `--kind K`
# may serve a folder as K where the deciding rule is K's or names K in `also`. Each test is the kind's
# own, in its reference module (embtrt.reference.detect runs them and says why each one did not match).
DETECTION: tuple[Rule, ...] = (
    Rule(PAGES, "embtrt.kinds.pages.reference:pages_rule", "a ColPaliForRetrieval folder (page images and queries)",
         vlm=True),
    Rule(VLM, "embtrt.kinds.vlm.reference:vlm_rule", "a Qwen3-VL folder with last-token pooling (a VLM embedder)", vlm=True),
    Rule(MULTIVECTOR, "embtrt.kinds.multivector.reference:colbert_rule", "a MultiVectorEncoder folder (ColBERT)"),
    Rule(MULTIVECTOR, "embtrt.kinds.multivector.reference:m3_rule",
         "bge-m3's colbert_linear.pt / sparse_linear.pt beside the model (--kind embedder: its dense vector alone)",
         also=(EMBEDDER,)),
    Rule(SPARSE, "embtrt.kinds.sparse.reference:sparse_rule", "a SparseEncoder folder (SPLADE)"),
    Rule(RERANKER, "embtrt.kinds.reranker.reference:cross_encoder_rule",
         "a CrossEncoder folder, or a *ForSequenceClassification architecture of one label", also=(CLASSIFIER,)),
    Rule(CLASSIFIER, "embtrt.kinds.classifier.reference:classifier_rule",
         "a *ForSequenceClassification architecture of several labels", also=(RERANKER,)),
    Rule(MULTIMODAL, "embtrt.kinds.multimodal.reference:text_and_image_rule",
         "a sentence-transformers folder whose model encodes texts and images (CLIP-style)"),
    Rule(EMBEDDER, "embtrt.kinds.embedder.reference:embedder_rule", "any other SentenceTransformer folder or encoder"),
)


def of_operation(operation: str) -> Kind:
    """The kind whose operation `operation` is (the first whose first operation it is, else the first serving it):
    the gateway's messages name its models ("this gateway serves no reranker")."""
    return next((k for k in KINDS if k.operations[0] == operation), None) or \
        next(k for k in KINDS if operation in k.operations)


def kind_of(name: str | None) -> Kind:
    """The kind named `name` (None or "": the default, as configs from before kinds say nothing);
    ValueError naming the kinds for an unknown one."""
    if not name:
        return DEFAULT
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown kind of model {name!r}: one of {', '.join(NAMES)}") from None


__all__ = ["CLASSIFIER", "DEFAULT", "EMBEDDER", "KINDS", "MULTIMODAL", "MULTIVECTOR", "NAMES", "PAGES", "RERANKER", "SPARSE", "VLM",
           "BY_NAME",
           "DETECTION", "Kind", "Rule", "kind_of", "of_operation",
           # the parts kinds are composed of (base.py)
           "DOOR", "LABEL_SCORES", "PAIR", "POOLED", "POOLS", "SCORES", "SPARSE_WEIGHTS", "TEXT", "TEXT_AND_IMAGE", "TEXT_OR_IMAGE",
           "TEXT_OR_PAIR", "TEXT_SIDES", "TOKEN_VECTORS", "Head", "Input", "Routing"]
