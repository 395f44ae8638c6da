"""Front door: TEXT -> tokenize once per batch -> route rows to bucket encoders (BLS) -> EMBEDDING.

TOKENS (INT64, one per text): the tokens embedded for it, prompt and every window included, so that
a caller (the gateway) can report usage without tokenizing again.

Only pb_utils glue; the logic is in embtrt_backend (tested without Triton).

encoder_mode "bls": each bucket's rows go to that bucket's encoder model (TensorRT, the
onnxruntime backend). encoder_mode "local" (python-ort, python-torch): the front door runs
the same encoder itself, saving one stub round trip per chunk.
"""

import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embtrt_backend.deps import use_bundle  # noqa: E402

use_bundle(os.path.dirname(os.path.abspath(__file__)))  # the repository's own packages, before importing them

from embtrt_backend import InputError  # noqa: E402
from embtrt_backend.batching import parameters, split_rows  # noqa: E402
from embtrt_backend.options import ModelOptions, load_calibration, parse_request_parameters, prompt_length  # noqa: E402
from embtrt_backend.pooling import exclude_prefix, pool_and_normalize  # noqa: E402
from embtrt_backend.routing import gather, plan  # noqa: E402
from embtrt_backend.text import TextTokenizer, decode_texts, merge_windows  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        p = parameters(args["model_config"])
        here = os.path.dirname(os.path.abspath(__file__))
        self.buckets = [int(x) for x in p["buckets"].split(",")]
        self.encoders = p["encoder_models"].split(",")
        self.input_names = tuple(p["input_names"].split(","))
        self.output_name = p["encoder_output"]
        self.fused = p["pooler"] == "fused"
        self.pooling = p["pooling"]
        self.normalize = p["normalize"] == "true"
        self.dim = int(p["embtrt.dim"])
        self.pad_to_bucket = p["pad_to_bucket"] == "true"
        self.encoder_batch = [int(x) for x in p["encoder_max_batch_sizes"].split(",")]  # per bucket (token budget)
        self.run_overhead = int(p.get("run_overhead_tokens", "8"))
        self.max_bytes = int(p["max_text_bytes"])
        self.tokenizer = TextTokenizer(
            os.path.join(here, "tokenizer.json"), int(p["max_seq_length"]), int(p["pad_id"]), p["overflow"],
            int(p.get("overflow_stride", "0")),
        )
        self.options = ModelOptions.from_parameters(p, load_calibration(here))
        self.prompt_tokens = {name: prompt_length(self.tokenizer.tok, text) for name, text in self.options.prompts.items()}
        self.local = None
        if p.get("encoder_mode") == "local":
            from embtrt_backend.encoder import encoder_from_parameters

            self.local = encoder_from_parameters(here, p)

    def _encode(self, feeds, bucket, skip=None):
        """One chunk of rows of one bucket -> vectors (synchronous: measured steadier than
        an async execute under the Python backend). `skip`: per row, the leading prompt tokens
        left out of pooling (include_prompt false; the encoder then returns hidden states)."""
        if self.local is not None:
            out = self.local.run(feeds)
        else:
            inputs = [pb_utils.Tensor(n, feeds[n]) for n in self.input_names]
            req = pb_utils.InferenceRequest(
                model_name=self.encoders[bucket], requested_output_names=[self.output_name], inputs=inputs
            )
            resp = req.exec()
            if resp.has_error():
                raise RuntimeError(f"encoder {self.encoders[bucket]}: {resp.error().message()}")
            out = pb_utils.get_output_tensor_by_name(resp, self.output_name).as_numpy()
        if not self.fused:
            mask = feeds["attention_mask"] if skip is None else exclude_prefix(feeds["attention_mask"], skip)
            out = pool_and_normalize(out, mask, self.pooling, self.normalize)
        return out

    def execute(self, requests):
        responses = [None] * len(requests)
        texts, counts, live, opts, modes, skips = [], [], [], [], [], []
        for i, request in enumerate(requests):
            try:
                arr = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                t = decode_texts(arr, self.max_bytes)
                if not t:
                    raise InputError("TEXT holds no rows")
                o = self.options.resolve(parse_request_parameters(request.parameters()))
            except InputError as exc:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            texts.extend([o.prompt + x for x in t] if o.prompt else t)
            counts.append(len(t))
            live.append(i)
            opts.append(o)
            modes.extend([o.truncate] * len(t))
            skips.extend([0 if self.options.include_prompt or not o.prompt_name else self.prompt_tokens[o.prompt_name]] * len(t))
        if not live:
            return responses
        enc = self.tokenizer.encode_mixed(texts, modes)
        text_rows = np.arange(len(texts)) if enc.owner is None else enc.owner
        tokens = np.bincount(text_rows, weights=enc.lengths, minlength=len(texts)).astype(np.int64)
        # Over-long texts (--overflow reject, or truncate NONE) fail their own request only.
        keep_counts, keep_live, keep_opts, keep_text = [], [], [], []
        for req_idx, o, rows in zip(live, opts, split_rows(np.arange(len(texts)), counts)):
            try:
                if self.tokenizer.refuses_long(o.truncate):
                    lens = enc.lengths[np.isin(text_rows, rows)]
                    over = np.nonzero(lens > self.tokenizer.max_length)[0]
                    if over.size:
                        raise InputError(f"row {int(over[0])}: text is longer than the max sequence length "
                                         f"{self.tokenizer.max_length} tokens (truncate NONE"
                                         f"{'' if o.truncate else ', the build used --overflow reject'})")
            except InputError as exc:
                responses[req_idx] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            keep_counts.append(len(rows))
            keep_live.append(req_idx)
            keep_opts.append(o)
            keep_text.append(rows)
        if not keep_live:
            return responses
        texts_kept = np.concatenate(keep_text)
        rows_enc = np.nonzero(np.isin(text_rows, texts_kept))[0]
        lengths = enc.lengths[rows_enc]
        skip_rows = np.asarray(skips, dtype=np.int64)[text_rows[rows_enc]]
        parts = []
        try:
            for b, chunk in plan(lengths, self.buckets, self.encoder_batch, self.run_overhead, self.pad_to_bucket):
                pad = self.buckets[b] if self.pad_to_bucket else int(lengths[chunk].max())
                feeds = self.tokenizer.pad(enc, rows_enc[chunk], pad, self.input_names)
                parts.append((chunk, self._encode(feeds, b, None if self.fused else skip_rows[chunk])))
        except Exception as exc:  # an encoder failure fails this batch's requests, not the model
            for req_idx in keep_live:
                responses[req_idx] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
            return responses
        vecs = gather(rows_enc.size, self.dim, parts)
        owner = None if enc.owner is None else np.searchsorted(texts_kept, text_rows[rows_enc])
        vecs = merge_windows(vecs, owner, texts_kept.size, self.normalize) if owner is not None else vecs
        for req_idx, o, part, rows in zip(keep_live, keep_opts, split_rows(vecs, keep_counts), keep_text):
            out = self.options.finish(part, o)
            responses[req_idx] = pb_utils.InferenceResponse(
                [pb_utils.Tensor(o.output, out), pb_utils.Tensor("TOKENS", tokens[rows].reshape(-1, 1))])
        return responses
