"""Tokenizer for one bucket: TEXT -> encoder inputs right-padded to the bucket length."""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embtrt_backend.deps import use_bundle  # noqa: E402

use_bundle(os.path.dirname(os.path.abspath(__file__)))  # the repository's own packages, before importing them

from embtrt_backend import InputError  # noqa: E402
from embtrt_backend.host import instances_of, size_threads  # noqa: E402
from embtrt_backend.batching import parameters  # noqa: E402
from embtrt_backend.drain import Drain  # noqa: E402
from embtrt_backend.options import OPTION_NAMES, ModelOptions, parse_request_parameters  # noqa: E402
from embtrt_backend.pooling import exclude_prefix  # noqa: E402
from embtrt_backend.text import TextTokenizer, decode_texts  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        self.drain = Drain(track=True)
        cfg = parameters(args["model_config"])
        p = size_threads(cfg, instances_of(json.loads(args["model_config"])))   # embtrt_backend.host
        here = os.path.dirname(os.path.abspath(__file__))
        self.bucket = int(p["bucket"])
        self.is_largest = p["largest_bucket"] == "true"
        self.input_names = tuple(p["input_names"].split(","))
        self.max_bytes = int(p["max_text_bytes"])
        self.tokenizer = TextTokenizer(
            os.path.join(here, "tokenizer.json"), int(p["max_seq_length"]), int(p["pad_id"]), p["overflow"],
            int(p.get("overflow_stride", "0")),
        )
        # The bucket ensembles take no request options: they apply the model's default prompt, as
        # SentenceTransformer.encode does without options (the front door takes the options).
        options = ModelOptions.from_parameters({"embtrt.dim": "1", **p})
        self.prompt = options.default.prompt
        self.skip = options.prompt_skip(options.default, self.tokenizer.tok)
        self.front_door = p.get("front_door", "the front-door model")

    def execute(self, requests):
        return self.drain.guard(pb_utils, requests, self._execute)   # refused while draining (embtrt_backend.drain)

    def _execute(self, requests):
        responses = []
        for request in requests:
            try:
                asked = sorted(k for k in parse_request_parameters(request.parameters()) if k in OPTION_NAMES)
                if asked:
                    raise InputError(f"the bucket ensembles take no request options ({', '.join(asked)}): they apply "
                                     f"the model's defaults; send options to {self.front_door}")
                arr = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                texts = decode_texts(arr, self.max_bytes)
                if not texts:
                    raise InputError("TEXT holds no rows")
                if self.prompt:
                    texts = [self.prompt + t for t in texts]
                enc = self.tokenizer.encode(texts)
                if enc.owner is not None and enc.lengths.size != len(texts):
                    row = int(np.nonzero(self.tokenizer.windows_per_text(enc, len(texts)) > 1)[0][0])
                    raise InputError(f"row {row}: text is longer than the max sequence length "
                                     f"{self.tokenizer.max_length} tokens; this model was built with --overflow chunk, "
                                     "which only the front-door model applies (mean of window vectors): send it there")
                self.tokenizer.check(enc.lengths, None if self.is_largest else self.bucket)
                feeds = self.tokenizer.pad(enc, np.arange(len(texts)), self.bucket, self.input_names)
            except InputError as exc:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)))
                continue
            out = [pb_utils.Tensor(n, feeds[n]) for n in self.input_names]
            if self.skip:
                out.append(pb_utils.Tensor("pooling_mask", exclude_prefix(feeds["attention_mask"], self.skip)))
            responses.append(pb_utils.InferenceResponse(out))
        return responses
