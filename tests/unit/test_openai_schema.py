"""The gateway's /v1/embeddings schema on its own (scale/gateway/dialects/openai.py, ops/embed.py): bodies
parsed into EmbeddingsRequest, and each bad body refused with its own status, message and param,
without a server. The same refusals through the real gateway: tests/integration/test_gateway.py."""

import numpy as np
import pytest
from embtrt_backend.options import ModelOptions

from embtrt.scale.gateway.dialects.openai import parse_embeddings
from embtrt.scale.gateway.ops.embed import EmbeddingsModel, EmbeddingsRequest
from embtrt.scale.gateway.errors import ApiError

VOCAB, MAX_LEN, MAX_BYTES = 100, 8, 16


def _model(route: str = "ids", token_ids: bool = True, **kw) -> EmbeddingsModel:
    base = dict(dim=8, normalize=True, prompts={"query": "q: ", "passage": "", "code": "c: "},
                calibration=np.random.default_rng(0).normal(size=(20, 8)).astype(np.float32))
    return EmbeddingsModel(ModelOptions(**{**base, **kw}), VOCAB, MAX_LEN, MAX_BYTES, route, token_ids)


MODELS = {"m": _model()}


def _parse(body, models=None, max_items: int = 4) -> EmbeddingsRequest:
    return parse_embeddings(body, models or MODELS, max_items)


def _refused(body, status: int, message: str, param: str | None = "input", models=None, max_items: int = 4) -> ApiError:
    with pytest.raises(ApiError) as info:
        _parse(body, models, max_items)
    err = info.value
    assert (err.status, err.message, err.param) == (status, message, param)
    return err


# ---- good bodies ------------------------------------------------------------------------------

def test_a_string_is_one_text_with_the_default_options_and_float_encoding():
    r = _parse({"model": "m", "input": "hello"})
    assert (r.model, r.served, r.texts, r.ids, r.encoding_format) == ("m", "m", ["hello"], None, "float")
    assert r.options == MODELS["m"].options.default
    with pytest.raises(AttributeError):  # frozen
        r.texts = None  # type: ignore[misc]


def test_a_list_of_strings_keeps_its_order_and_base64_is_kept():
    r = _parse({"model": "m", "input": ["b", "a", "c"], "encoding_format": "base64"})
    assert (r.texts, r.ids, r.encoding_format) == (["b", "a", "c"], None, "base64")


def test_token_ids_flat_are_one_item_and_lists_are_one_item_each():
    flat = _parse({"model": "m", "input": [1, 2, 99]})
    assert (flat.texts, flat.ids) == (None, [[1, 2, 99]])
    nested = _parse({"model": "m", "input": [[5], [0, 1, 2, 3, 4, 5, 6, 7]]})
    assert (nested.texts, nested.ids) == (None, [[5], [0, 1, 2, 3, 4, 5, 6, 7]])


def test_option_fields_are_resolved_by_the_models_options():
    r = _parse({"model": "m", "input": "x", "dimensions": 4, "truncate": "start", "embedding_type": "int8",
                "prompt_name": "code"})
    o = r.options
    assert (o.dimensions, o.truncate, o.embedding_type, o.prompt_name, o.prompt) == (4, "START", "int8", "code", "c: ")
    assert _parse({"model": "m", "input": "x", "dimensions": 8}).options.dimensions is None  # the full width


def test_name_query_and_name_prompt_aliases_carry_their_options_and_the_response_echoes_the_alias():
    q = _parse({"model": "m-query", "input": "x"})
    assert (q.model, q.served, q.options.prompt_name, q.options.prompt) == ("m-query", "m", "query", "q: ")
    c = _parse({"model": "m-code", "input": "x"})
    assert (c.served, c.options.prompt_name) == ("m", "code")
    same = _parse({"model": "m-query", "input": "x", "input_type": "query"})  # agreeing with the name is fine
    assert same.options.prompt_name == "query"


def test_the_alias_picks_its_own_model_among_several():
    models = {"m": _model(), "other": _model(prompts={"query": "Q: "})}
    r = _parse({"model": "other-query", "input": "x"}, models)
    assert (r.served, r.options.prompt) == ("other", "Q: ")


def test_token_ids_take_the_models_default_prompt_silently_but_no_explicit_one():
    models = {"m": _model(default_prompt_name="query")}
    assert _parse({"model": "m", "input": [1, 2]}, models).ids == [[1, 2]]


def test_a_text_at_the_byte_limit_is_taken():
    assert _parse({"model": "m", "input": "é" * 8}).texts == ["é" * 8]  # 16 bytes of UTF-8


# ---- bad bodies -------------------------------------------------------------------------------

@pytest.mark.parametrize("body", [[{"model": "m", "input": "x"}], "x", 3, None])
def test_a_body_that_is_not_an_object_is_400(body):
    _refused(body, 400, "the request body must be a JSON object", None)


def test_a_missing_model_is_400():
    _refused({"input": "x"}, 400, "you must provide a model parameter", "model")
    _refused({"model": None, "input": "x"}, 400, "you must provide a model parameter", "model")


@pytest.mark.parametrize("model", [5, ["m"], {"name": "m"}, True])
def test_a_model_that_is_not_a_string_is_400(model):
    _refused({"model": model, "input": "x"}, 400, "model must be a string", "model")


def test_an_unknown_model_is_404_naming_the_models_and_their_aliases():
    err = _refused({"model": "nope", "input": "x"}, 404, "the model 'nope' does not exist; this gateway serves 'm' "
                   "(also as m-code, m-document, m-passage, m-query)", "model")
    assert err.code == "model_not_found"
    _refused({"model": "m-nope", "input": "x"}, 404, "the model 'm-nope' does not exist; this gateway serves 'm' "
             "(also as m-code, m-document, m-passage, m-query)", "model")
    plain = {"m": _model(prompts={}, calibration=None)}
    _refused({"model": "x", "input": "x"}, 404, "the model 'x' does not exist; this gateway serves 'm'", "model", plain)


@pytest.mark.parametrize("fmt", ["int8", "FLOAT", None, 1])
def test_a_bad_encoding_format_is_400(fmt):
    _refused({"model": "m", "input": "x", "encoding_format": fmt}, 400,
             f"encoding_format must be 'float' or 'base64', not {fmt!r}", "encoding_format")


@pytest.mark.parametrize("dims", ["4", 4.0])
def test_dimensions_as_a_string_or_a_float_is_400(dims):
    _refused({"model": "m", "input": "x", "dimensions": dims}, 400, f"dimensions must be an integer, got {dims!r}",
             "dimensions")


def test_dimensions_outside_the_models_widths_is_400_from_its_options():
    _refused({"model": "m", "input": "x", "dimensions": 9}, 400, "invalid dimensions 9: this model allows any width "
             "from 1 to 8", "dimensions")


def test_an_option_that_disagrees_with_the_model_name_is_400():
    _refused({"model": "m-query", "input": "x", "input_type": "passage"}, 400,
             "input_type 'passage' disagrees with the model name 'm-query'", "input_type")


def test_a_missing_input_is_400():
    _refused({"model": "m"}, 400, "you must provide an input parameter")


def test_too_many_items_is_400():
    _refused({"model": "m", "input": ["a"] * 5}, 400, "input has 5 items; at most 4 per request")
    _refused({"model": "m", "input": [[1]] * 3}, 400, "input has 3 items; at most 2 per request", max_items=2)


@pytest.mark.parametrize("inp", [[], 5, {"a": 1}, None])
def test_an_empty_list_or_a_non_list_input_is_400(inp):
    _refused({"model": "m", "input": inp}, 400, "input must be a string, a non-empty list of strings, a list of token "
             "ids or a list of token-id lists")


@pytest.mark.parametrize("inp", [["a", 3], [1, [2]], [1, "a"], [1.5, 2], [True, False]])
def test_mixed_item_types_are_400(inp):
    _refused({"model": "m", "input": inp}, 400, "input items must all be strings, all token ids, or all token-id lists")


def test_a_text_over_the_byte_limit_is_400_naming_its_index_and_size():
    _refused({"model": "m", "input": "é" * 9}, 400, "input[0] is 18 bytes of UTF-8, over the limit of 16 bytes per text")
    _refused({"model": "m", "input": ["ok", "x" * 17]}, 400,
             "input[1] is 17 bytes of UTF-8, over the limit of 16 bytes per text")


@pytest.mark.parametrize("bad", [VOCAB, -1, 10**9])
def test_a_token_id_outside_the_vocabulary_is_400(bad):
    _refused({"model": "m", "input": [1, bad]}, 400, f"input[0]: token id {bad} is outside the vocabulary (0..99)")
    _refused({"model": "m", "input": [[1], [2, bad]]}, 400, f"input[1]: token id {bad} is outside the vocabulary (0..99)")


def test_a_token_list_longer_than_the_max_length_or_empty_is_400():
    _refused({"model": "m", "input": [list(range(9))]}, 400,
             "input[0] has 9 tokens; m takes at most 8 (token-id input is never truncated)")
    _refused({"model": "m", "input": [[1], []]}, 400, "input[1] must be a non-empty list of integer token ids")
    _refused({"model": "m", "input": [[1], [1, "a"]]}, 400, "input[1] must be a non-empty list of integer token ids")


@pytest.mark.parametrize("body", [{"model": "m", "input": [1, 2], "prompt_name": "query"},
                                  {"model": "m-query", "input": [[1, 2]]},
                                  {"model": "m", "input": [[1, 2]], "input_type": "query"}])
def test_a_prompt_with_token_ids_is_400(body):
    _refused(body, 400, "token-id input is embedded as given: a prompt (prompt_name / input_type) applies to text "
             "input only")


def test_the_text_route_refuses_a_prompt_or_truncation_other_than_the_default():
    models = {"m": _model(route="text")}
    msg = ("this gateway sends text to the bucket ensembles (--route text), which apply the model's default prompt "
           "and truncation only; run it with --route ids for prompt_name / input_type / truncate")
    _refused({"model": "m", "input": "x", "prompt_name": "query"}, 400, msg, "prompt_name", models)
    _refused({"model": "m", "input": "x", "truncate": "END"}, 400, msg, "truncate", models)
    assert _parse({"model": "m", "input": "x", "dimensions": 4}, models).options.dimensions == 4


@pytest.mark.parametrize("inp", [[1, 2, 3], [[1, 2], [3]]])
def test_token_ids_are_refused_unless_the_gateway_takes_them(inp):
    with pytest.raises(ApiError) as info:
        _parse({"model": "m", "input": inp}, models={"m": _model(token_ids=False)})
    err = info.value
    assert (err.status, err.param, err.code) == (400, "input", "token_ids_disabled")
    assert err.message.startswith("token-id input is off on this gateway: ids are embedded as this model's own")
    assert "check_embedding_ctx_length=False" in err.message and "--token-ids" in err.message
    assert _parse({"model": "m", "input": ["still ok"]}, models={"m": _model(token_ids=False)}).texts


# ---- a VLM embedder's fused shapes (embtrt.scale.gateway.images) ---------------------------------

def test_messages_and_instruction_are_a_vlm_embedders_and_refused_for_a_text_embedder():
    _refused({"model": "m", "messages": [{"role": "user", "content": "q"}]}, 400,
             "messages (vLLM's chat-style embeddings) is served for VLM embedders; m is an embedder: send input",
             "messages")
    _refused({"model": "m", "input": "q", "instruction": "Represent it."}, 400,
             "instruction is a VLM embedder's; m takes none", "instruction")


def test_vllm_messages_are_one_input_with_the_system_message_as_its_instruction():
    from embtrt.kinds.vlm.scale import VlmModel
    from embtrt.scale.gateway.images import Fused

    from embtrt.reference.images import data_uri, gate_images

    png = gate_images(1, seed=3)[0][0]
    vlm = {"v": VlmModel(ModelOptions(dim=8, normalize=True, prompts={}), VOCAB, MAX_LEN, 64)}
    user = [{"type": "text", "text": "q"}, {"type": "image_url", "image_url": {"url": data_uri(png, "png")}}]
    r = _parse({"model": "v", "messages": [{"role": "system", "content": [{"type": "text", "text": "Find it."}]},
                                           {"role": "user", "content": user}]}, vlm)
    assert (r.texts, r.media, r.instruction, r.media_field) == (["q"], (Fused(png),), "Find it.", "messages")
    r = _parse({"model": "v", "messages": [{"role": "user", "content": "just text"}], "instruction": "Find it."}, vlm)
    assert (r.texts, r.media, r.instruction) == (["just text"], (), "Find it.")
    r = _parse({"model": "v", "input": ["a", "b"], "instruction": "Find it."}, vlm)
    assert (r.texts, r.instruction) == (["a", "b"], "Find it.")
    _refused({"model": "v", "input": "a", "instruction": ""}, 400, "instruction must be a non-empty string, got ''",
             "instruction", vlm)
    _refused({"model": "v", "input": "a", "messages": [{"role": "user", "content": "q"}]}, 400,
             "send input or messages, not both", "messages", vlm)
    _refused({"model": "v", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]},
             400, "messages[0].content has 2 text parts: a fused input is one text and one image", "messages", vlm)
    _refused({"model": "v", "messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                                         {"role": "user", "content": "q"}]},
             400, "messages[0]: a system message is the instruction, a text only", "messages", vlm)


def test_vllm_messages_refuse_a_part_without_its_image_an_empty_system_message_and_late_chunking():
    from embtrt.kinds.vlm.scale import VlmModel

    vlm = {"v": VlmModel(ModelOptions(dim=8, normalize=True, prompts={}), VOCAB, MAX_LEN, 64)}
    for url in ({}, {"url": None}, {"url": ""}):   # never read as a text: the image would be lost
        _refused({"model": "v", "messages": [{"role": "user", "content": [{"type": "text", "text": "q"},
                                                                          {"type": "image_url", "image_url": url}]}]},
                 400, f"messages[0].content[1]: an image_url part's url is a data URI string (data:image/png;base64,...), "
                 f"got {url.get('url')!r}" if url else "messages[0].content[1]: an image_url part's url is a data URI "
                 "string (data:image/png;base64,...), got None", "messages", vlm)
    _refused({"model": "v", "messages": [{"role": "system", "content": " "}, {"role": "user", "content": "q"}]}, 400,
             "messages[0]: an empty system message (the instruction): leave it out for the model's default", "messages", vlm)
    _refused({"model": "v", "messages": [{"role": "user", "content": "q"}], "late_chunking": True}, 400,
             "late_chunking applies to input texts, not to messages", "late_chunking", vlm)
    long = "x" * 65   # over the model's 64 bytes: named by the user message's own index
    _refused({"model": "v", "messages": [{"role": "system", "content": "Find it."}, {"role": "user", "content": long}]},
             400, "messages[1] is 65 bytes of UTF-8, over the limit of 64 bytes per text", "messages", vlm)
    _refused({"model": "v", "input": "q", "instruction": "y" * 65}, 400,
             "instruction is 65 bytes of UTF-8, over the limit of 64 bytes per text", "instruction", vlm)
    r = _parse({"model": "v", "messages": [{"role": "system", "content": "Find it."}, {"role": "user", "content": "q"}]}, vlm)
    assert r.item_names == ("messages[1]",)
