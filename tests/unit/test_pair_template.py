"""#71: an LLM-style reranker's prompt template (embtrt_backend.pair_template) and the pair core's tokenizing
through it: the middle cut to the room the prefix and suffix leave (both kept whole), the instruction per
request, the refusals; the build options that set it. The served scores against the model card and
CrossEncoder: tests/integration/test_llm_reranker.py."""

from __future__ import annotations

import json

import pytest
from embtrt_backend import InputError
from embtrt_backend.pair_template import QWEN3_RERANKER, PairTemplate, resolve
from embtrt_backend.pairs import DEFAULT, PairOptions, PairTokenizer

from embtrt.errors import SpecError
from embtrt.export.spec_options import spec_from_options

TEMPLATE = PairTemplate("Judge: ", "I={instruction} Q={query} D={document}", " Answer:", "find it")


def test_the_middle_takes_the_request_instruction_or_the_default():
    assert TEMPLATE.text("a cat", "the cat sat") == "I=find it Q=a cat D=the cat sat"
    assert TEMPLATE.text("a cat", "the cat sat", "other") == "I=other Q=a cat D=the cat sat"
    assert TEMPLATE.text("{x}", "{document}") == "I=find it Q={x} D={document}"   # user text is not a format string
    assert PairTemplate.from_json(TEMPLATE.to_json()) == TEMPLATE and PairTemplate.from_json("") is None
    with pytest.raises(ValueError, match="no {document}"):
        PairTemplate("", "{query}", "", "")
    with pytest.raises(ValueError, match="takes only"):
        PairTemplate("", "{query} {document} {other}", "", "")


def test_resolve_takes_a_preset_a_file_and_an_instruction_and_says_what_is_wrong(tmp_path):
    assert resolve("qwen3-reranker", None, None) == QWEN3_RERANKER
    assert resolve(None, "mine", QWEN3_RERANKER).instruction == "mine"
    assert resolve(None, None, None) is None
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"prefix": "P", "middle": "{query}|{document}", "suffix": "S"}))
    assert resolve(str(f), None, None) == PairTemplate("P", "{query}|{document}", "S", "")
    f.write_text(json.dumps({"prefix": "P", "middle": "{query}|{document}"}))
    with pytest.raises(ValueError, match="no string suffix"):
        resolve(str(f), None, None)
    with pytest.raises(ValueError, match="neither a template"):
        resolve("qwen4", None, None)
    assert resolve(TEMPLATE.to_json(), None, None) == TEMPLATE   # the JSON itself (a rebuild command gives it so)
    with pytest.raises(ValueError, match="needs a pair template"):
        resolve(None, "mine", None)


def test_tokenizing_through_the_template_keeps_prefix_and_suffix_and_cuts_the_middle(minilm_path, corpus):
    from tokenizers import Tokenizer

    tok = PairTokenizer(str(minilm_path / "tokenizer.json"), 48, 0)
    full = Tokenizer.from_str(tok.text.tok.to_str())
    full.no_truncation()
    prefix = full.encode(TEMPLATE.prefix, add_special_tokens=False).ids
    suffix = full.encode(TEMPLATE.suffix, add_special_tokens=False).ids
    room = 48 - len(prefix) - len(suffix)   # the middle's, its own [CLS] and [SEP] (the tokenizer's) included
    query, docs = "what sat", ["the cat sat", " ".join(corpus[:5])]
    mids = [full.encode(TEMPLATE.text(query, d), add_special_tokens=True).ids for d in docs]
    assert len(mids[0]) < room < len(mids[1])
    right = tok.encode_template(TEMPLATE, [query] * 2, docs, DEFAULT)
    assert right.ids[0] == prefix + mids[0] + suffix and right.lengths.tolist() == [len(right.ids[0]), 48]
    assert right.ids[1] == prefix + mids[1][:room - 1] + mids[1][-1:] + suffix   # the middle's end cut, [SEP] kept
    left = tok.encode_template(TEMPLATE, [query], docs[1:], PairOptions(direction="left"))
    assert left.ids[0] == prefix + mids[1][:1] + mids[1][-(room - 1):] + suffix   # its start cut
    refused = tok.encode_template(TEMPLATE, [query], docs[1:], PairOptions(truncate=False))
    assert refused.lengths[0] == 49   # one over: the core refuses the request (truncate false)
    other = tok.encode_template(TEMPLATE, [query], docs[:1], PairOptions(instruction="other"))
    assert other.ids[0] == prefix + full.encode(TEMPLATE.text(query, docs[0], "other")).ids + suffix
    assert right.type_ids[0] == [0] * len(right.ids[0])


def test_instruction_is_a_request_option_only_of_a_templated_model():
    assert PairOptions.parse({"instruction": "x"}, takes_instruction=True).instruction == "x"
    assert PairOptions.parse({}, takes_instruction=True).instruction is None
    with pytest.raises(InputError, match="unknown request parameter 'instruction'"):
        PairOptions.parse({"instruction": "x"})
    with pytest.raises(InputError, match="instruction 3: must be a string"):
        PairOptions.parse({"instruction": 3}, takes_instruction=True)


def test_the_build_options_are_a_rerankers_and_an_instruction_needs_a_template(cross_encoders, tmp_path):
    with pytest.raises(SpecError, match="invalid pair_template(.|\n)*a reranker's option"):
        spec_from_options(None, tmp_path / "a", pair_template="qwen3-reranker")
    with pytest.raises(SpecError, match="needs a pair template"):
        spec_from_options(cross_encoders["qwen3-ce"], tmp_path / "b", instruction="mine")
    with pytest.raises(SpecError, match="neither a template"):
        spec_from_options(cross_encoders["qwen3-ce"], tmp_path / "c", pair_template="nope")
    spec = spec_from_options(cross_encoders["qwen3-ce"], tmp_path / "d", pair_template="qwen3-reranker", instruction="mine")
    assert PairTemplate.from_json(spec.pair_template).instruction == "mine"
    from embtrt.export.encoders import rebuild_command

    assert "--pair-template qwen3-reranker --instruction mine" in rebuild_command(spec)
    custom = spec_from_options(cross_encoders["qwen3-ce"], tmp_path / "e", pair_template=TEMPLATE.to_json())
    assert PairTemplate.from_json(custom.pair_template) == TEMPLATE
    assert f"--pair-template '{TEMPLATE.to_json()}'" in rebuild_command(custom)
