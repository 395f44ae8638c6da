"""Front door: TEXT -> tokenize once per batch -> route rows to bucket encoders (BLS) -> EMBEDDING.

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
from embtrt_backend.pooling import pool_and_normalize  # noqa: E402
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
        self.local = None
        if p.get("encoder_mode") == "local":
            from embtrt_backend.encoder import encoder_from_parameters

            self.local = encoder_from_parameters(here, p)

    def _encode(self, feeds, bucket):
        """One chunk of rows of one bucket -> vectors (synchronous: measured steadier than
        an async execute under the Python backend)."""
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
            out = pool_and_normalize(out, feeds["attention_mask"], self.pooling, self.normalize)
        return out

    def execute(self, requests):
        responses = [None] * len(requests)
        texts, counts, live = [], [], []
        for i, request in enumerate(requests):
            try:
                arr = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                t = decode_texts(arr, self.max_bytes)
                if not t:
                    raise InputError("TEXT holds no rows")
            except InputError as exc:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            texts.extend(t)
            counts.append(len(t))
            live.append(i)
        if not live:
            return responses
        enc = self.tokenizer.encode(texts)
        # Reject-mode over-long rows fail their own request only.
        keep_rows, keep_counts, keep_live = [], [], []
        for req_idx, rows in zip(live, split_rows(np.arange(len(texts)), counts)):
            try:
                self.tokenizer.check(enc.lengths[rows])
            except InputError as exc:
                responses[req_idx] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            keep_rows.append(rows)
            keep_counts.append(len(rows))
            keep_live.append(req_idx)
        if not keep_live:
            return responses
        rows_all = np.concatenate(keep_rows)
        # --overflow chunk: the rows are max-length windows (nothing was rejected, so every text is kept)
        rows_enc = rows_all if enc.owner is None else np.arange(enc.lengths.size)
        lengths = enc.lengths[rows_enc]
        parts = []
        try:
            for b, chunk in plan(lengths, self.buckets, self.encoder_batch, self.run_overhead, self.pad_to_bucket):
                pad = self.buckets[b] if self.pad_to_bucket else int(lengths[chunk].max())
                parts.append((chunk, self._encode(self.tokenizer.pad(enc, rows_enc[chunk], pad, self.input_names), b)))
        except Exception as exc:  # an encoder failure fails this batch's requests, not the model
            for req_idx in keep_live:
                responses[req_idx] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
            return responses
        vecs = merge_windows(gather(rows_enc.size, self.dim, parts), enc.owner, len(texts), self.normalize)
        for req_idx, part in zip(keep_live, split_rows(vecs, keep_counts)):
            responses[req_idx] = pb_utils.InferenceResponse([pb_utils.Tensor("EMBEDDING", part)])
        return responses
