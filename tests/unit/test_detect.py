"""What kind a model folder is: the registry's ordered detection rules (embtrt_backend.kinds.DETECTION),
each its kind's own, run by embtrt.reference.detect. Folders here are the files the rules read, nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embtrt.reference.detect import detect, rules_help
from embtrt_backend.kinds import DETECTION, NAMES


def folder(tmp_path: Path, name: str, files: dict[str, object]) -> Path:
    d = tmp_path / name
    d.mkdir()
    for rel, doc in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return d


ST = {"modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]}
SEQ = {"architectures": ["BertForSequenceClassification"]}
CASES = {   # folder -> (kind, rule number, a phrase of why)
    "colpali": ({"config.json": {"architectures": ["ColPaliForRetrieval"]}}, "pages", 1, "names ColPaliForRetrieval"),
    "colbert": ({**ST, "config_sentence_transformers.json": {"model_type": "MultiVectorEncoder"}}, "multivector", 3,
                "MultiVectorEncoder"),
    "m3": ({**ST, "config.json": {"architectures": ["XLMRobertaModel"]}, "colbert_linear.pt": "", "sparse_linear.pt": ""},
           "multivector", 4, "colbert_linear.pt and sparse_linear.pt"),
    "splade": ({"config_sentence_transformers.json": {"model_type": "SparseEncoder"}}, "sparse", 5, "SparseEncoder"),
    "splade-modules": ({"modules.json": [{"type": "sentence_transformers.sparse_encoder.models.SpladePooling"}]},
                       "sparse", 5, "SPLADE"),
    "ce": ({"config_sentence_transformers.json": {"model_type": "CrossEncoder"}, "config.json": {**SEQ, "num_labels": 3}},
           "reranker", 6, "model_type CrossEncoder"),
    "one-label": ({"config.json": {**SEQ, "id2label": {"0": "LABEL_0"}}}, "reranker", 6, "with one label"),
    "old-ce": ({"config.json": {**SEQ, "num_labels": 3, "sbert_ce_default_activation_function": "torch.nn.Sigmoid"}},
               "reranker", 6, "before 4.0"),
    "cls3": ({"config.json": {**SEQ, "id2label": {"0": "a", "1": "b", "2": "c"}}}, "classifier", 7, "with 3 labels"),
    "clip": ({"modules.json": [{"idx": 0, "path": "0_CLIPModel", "type": "sentence_transformers.models.CLIPModel"}]},
             "multimodal", 8, "texts and images"),
    "st": (ST, "embedder", 9, "SentenceTransformer folder"),
    "bare": ({"config.json": {"architectures": ["BertModel"]}}, "embedder", 9, "names BertModel (an encoder)"),
    "empty": ({}, "embedder", 9, "no architecture"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_first_matching_rule_decides_and_says_what_it_saw(tmp_path, name):
    files, kind, number, phrase = CASES[name]
    found = detect(folder(tmp_path, name, files))
    assert (found.kind.name, DETECTION.index(found.rule) + 1) == (kind, number)
    assert phrase in found.why
    assert found.explain() == f"{kind} (rule {number} of {len(DETECTION)}: {found.why})"
    assert [r for r, _ in found.passed] == list(DETECTION[:number - 1])   # each rule before it ran and said why not
    assert all(why for _, why in found.passed)


def test_why_not_names_what_the_rule_looked_for(tmp_path):
    found = detect(folder(tmp_path, "cls3", CASES["cls3"][0]))
    said = dict((r.kind.name, why) for r, why in found.passed)
    assert "3 labels and no CrossEncoder mark" in said["reranker"]
    assert "not ColPaliForRetrieval" in [why for r, why in found.passed][0]
    assert "not qwen3_vl" in [why for r, why in found.passed][1]
    assert "MultiVectorEncoder" in [why for r, why in found.passed][2]


@pytest.mark.parametrize("name, admitted, refused", [
    ("m3", {"multivector", "embedder"}, {"sparse", "reranker"}),       # bge-m3 is a SentenceTransformer too
    ("colbert", {"multivector"}, {"embedder"}),
    ("cls3", {"classifier", "reranker"}, {"embedder"}),                 # a *ForSequenceClassification folder: either
    ("one-label", {"reranker", "classifier"}, {"sparse"}),
    ("splade", {"sparse"}, {"embedder", "multivector"}),
])
def test_kind_may_serve_a_folder_as_its_rule_allows(tmp_path, name, admitted, refused):
    found = detect(folder(tmp_path, name, CASES[name][0]))
    assert all(found.admits(k) for k in admitted)
    assert not any(found.admits(k) for k in refused)


def test_every_rule_is_its_own_kinds_and_every_kind_has_one():
    assert {r.kind.name for r in DETECTION} == set(NAMES)
    for r in DETECTION:
        assert r.test.startswith(f"embtrt.kinds.{r.kind.name}.reference:"), r.test   # the kind's own module
    assert rules_help().count(". ") >= len(DETECTION) and "9. embedder" in rules_help()


def test_the_build_log_line_names_the_rule_or_kinds_choice_beside_it(tmp_path):
    from types import SimpleNamespace

    from embtrt.export.pipeline import kind_line
    from embtrt.export.spec_options import spec_from_options

    bundled = spec_from_options(None, tmp_path / "unused")
    assert kind_line(bundled) == "embedder (rule 9 of 9: a sentence-transformers SentenceTransformer folder)"
    one = folder(tmp_path, "one-label", CASES["one-label"][0])
    chosen = kind_line(SimpleNamespace(model_dir=one, kind="classifier"))   # as spec_from_options admits it
    assert chosen.startswith("classifier, as --kind says (the folder alone: reranker (rule 6 of 9: config.json names")


def test_a_causal_lm_without_sentence_transformers_files_is_refused_not_built_as_an_embedder(tmp_path):
    """#71: a Qwen3-Reranker-shaped folder (Qwen3ForCausalLM, no modules.json) was detected as an embedder by the
    last rule and built as one (its hidden states pooled): refused now, saying what it likely is and what builds;
    with modules.json (a decoder embedder, as Qwen3-Embedding saves itself) it is an embedder."""
    from embtrt.errors import SpecError

    causal = {"config.json": {"architectures": ["Qwen3ForCausalLM"]}}
    with pytest.raises(SpecError, match="causal language model .Qwen3ForCausalLM. without sentence-transformers' modules.json") as e:
        detect(folder(tmp_path, "reranker", causal))
    assert "sequence-classification conversion" in str(e.value.hint)
    found = detect(folder(tmp_path, "embedder", {**causal, **ST}))
    assert found.kind.name == "embedder" and "SentenceTransformer folder" in found.why


@pytest.mark.parametrize("extra", [{}, {"config_sentence_transformers.json": {"model_type": "MultiVectorEncoder"}}])
def test_a_colqwen2_folder_is_a_page_image_retriever_whoever_saved_it(tmp_path, extra):
    """#70 item 1: ColQwen2ForRetrieval builds as the page-image retriever (transformers' class, its positions), saved by
    transformers or by sentence-transformers' MultiVectorEncoder (not a ColBERT: rule 1 decides first)."""
    config = {"architectures": ["ColQwen2ForRetrieval"], "model_type": "colqwen2", "vlm_config": {"model_type": "qwen2_vl"}}
    found = detect(folder(tmp_path, "colqwen2", {"config.json": config, **extra}))
    assert found.kind.name == "pages" and "ColQwen2ForRetrieval" in found.why


@pytest.mark.parametrize("config, extra, said", [
    ({"architectures": ["ColQwen2_5ForRetrieval"], "model_type": "colqwen2_5", "vlm_config": {"model_type": "qwen2_5_vl"}},
     {"config_sentence_transformers.json": {"model_type": "MultiVectorEncoder"}}, "ColQwen2_5ForRetrieval over"),   # not ColBERT
    ({"architectures": ["Qwen3VLModel"], "model_type": "qwen3_vl", "image_token_id": 151655}, {}, "Qwen3VLModel, whose text"),
    # a sentence-transformers save of a VLM embedder (a Transformer of text and image modalities): not two towers
    ({"architectures": ["Qwen3VLModel"], "model_type": "qwen3_vl", "image_token_id": 151655},
     {"modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}],
      "sentence_bert_config.json": {"modality_config": {"text": {}, "image": {}, "message": {}}}}, "Qwen3VLModel, whose text"),
])
def test_a_vision_language_model_of_one_sequence_is_refused_not_built_as_a_text_kind(tmp_path, config, extra, said):
    """#70 groundwork: a ColPali folder was detected as an embedder (rule 7), saved by sentence-transformers as a
    ColBERT (rule 1), a Qwen3-VL as an embedder: each would be served as a text model, not its output. Now a
    ColPaliForRetrieval folder is the page-image retriever's (first rule); a VLM only a text kind's rule matches is
    refused. A CLIP-style two-tower config (vision_config and text_config, no image token) is not caught."""
    from embtrt.errors import SpecError

    with pytest.raises(SpecError, match="vision-language model that reads images in one sequence") as e:
        detect(folder(tmp_path, "vlm", {"config.json": config, **extra}))
    assert said in e.value.message and "text-and-image kind" in str(e.value.hint)
    clip = {"architectures": ["CLIPModel"], "model_type": "clip", "text_config": {}, "vision_config": {}}
    assert detect(folder(tmp_path, "clip", {"config.json": clip})).kind.name == "embedder"   # as before: rule 8
    colpali = {"architectures": ["ColPaliForRetrieval"], "model_type": "colpali", "vlm_config": {"model_type": "paligemma"}}
    for more in ({}, {"config_sentence_transformers.json": {"model_type": "MultiVectorEncoder"}}):
        found = detect(folder(tmp_path, f"colpali{len(more)}", {"config.json": colpali, **more}))
        assert found.kind.name == "pages" and found.why == "config.json names ColPaliForRetrieval"
