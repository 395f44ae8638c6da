"""The sparse front door's options and output without Triton."""

from __future__ import annotations

import numpy as np
import pytest

from embtrt_backend import InputError
from embtrt_backend.options import ModelOptions
from embtrt_backend.sparse_weights import densify, resolve, sparsify


def test_sparsify_pads_rows_and_keeps_the_largest():
    w = np.array([[0, 3, 0, 1, 2], [0, 0, 0, 0, 0], [5, 0, 0, 0, 0]], np.float32)
    idx, val = sparsify(w)
    assert idx.tolist() == [[1, 3, 4], [-1, -1, -1], [0, -1, -1]] and val[0].tolist() == [3, 1, 2]
    assert np.array_equal(densify(idx, val, 5), w)
    idx2, val2 = sparsify(w, 2)
    assert idx2[0].tolist() == [1, 4] and val2[0].tolist() == [3, 2]


def test_options_map_input_type_onto_prompts_and_refuse_what_does_not_apply():
    opts = ModelOptions(dim=10, normalize=False, prompts={"query": "query: ", "document": ""})
    assert resolve(opts, {"input_type": "query"})[0].prompt == "query: "
    assert resolve(opts, {"input_type": "passage"})[0].prompt == ""
    assert resolve(ModelOptions(dim=10, normalize=False, prompts={}), {"input_type": "query"})[0].prompt == ""   # no prompt: same model
    assert resolve(opts, {"max_active_dims": 4})[1] == 4
    assert resolve(opts, {})[1] is None                         # every active dimension
    assert resolve(opts, {}, default_k=8)[1] == 8               # the folder's max_active_dims
    assert resolve(opts, {"max_active_dims": 16}, default_k=8)[1] == 16   # the request's own wins
    for raw, name in (({"dimensions": 4}, "dimensions"), ({"embedding_type": "int8"}, "embedding_type"),
                      ({"max_active_dims": 0}, "max_active_dims"), ({"input_type": "title"}, "input_type")):
        with pytest.raises(InputError) as err:
            resolve(opts, raw)
        assert err.value.param == name
