"""The gateway's refusal of a request its request core refuses, named by the request's item, without a
server: the front door's files of the bundled MiniLM's repository are all the gateway reads."""

import asyncio
import json
import shutil

import pytest

from embtrt.scale.gateway.errors import ApiError
from embtrt.scale.gateway.config import GatewayConfig
from embtrt.kinds.embedder.scale import Embedder

NAME = "all_minilm_l6_v2"


@pytest.fixture
def no_special_tokens(minilm_repo, tmp_path):
    """The repository's manifest and front door, its tokenizer without special tokens (as some decoder
    models ship): an empty text is then a row of no tokens."""
    repo = tmp_path / "repo"
    (repo / NAME / "1").mkdir(parents=True)
    shutil.copy2(minilm_repo / "embtrt.json", repo / "embtrt.json")
    shutil.copy2(minilm_repo / NAME / "config.pbtxt", repo / NAME / "config.pbtxt")
    shutil.copy2(minilm_repo / NAME / "1" / "embtrt_calibration.npy", repo / NAME / "1")
    raw = json.loads((minilm_repo / NAME / "1" / "tokenizer.json").read_text())
    raw["post_processor"] = None
    (repo / NAME / "1" / "tokenizer.json").write_text(json.dumps(raw))
    return repo


def _refusal(repo, texts: list[str], **options) -> ApiError:
    gw = Embedder(GatewayConfig(repository=repo, triton="127.0.0.1:1", route="ids"))
    with pytest.raises(ApiError) as info:
        asyncio.run(gw.routing.prepare(texts, None, gw.served.options.resolve(options)))
    return info.value


def test_a_text_of_no_tokens_is_a_400_naming_its_item_not_an_over_long_one(no_special_tokens):
    err = _refusal(no_special_tokens, ["a text", ""])
    assert (err.status, err.message, err.param) == (400, "input[1]: the text tokenizes to no tokens", "input")


def test_an_over_long_text_under_truncate_none_is_still_named_as_such(no_special_tokens):
    err = _refusal(no_special_tokens, ["a text", "word " * 400], truncate="NONE")
    assert err.status == 400 and err.message == ("input[1] is longer than the max sequence length 256 tokens and "
                                                 "truncate is NONE")
