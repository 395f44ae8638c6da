"""What the gateway knows of one repository it fronts: the manifest's shape of the model, the
front door's limits, the served tokenizer and the model's request options."""

from __future__ import annotations

from pathlib import Path

from ...repository.manifest import read_manifest


class Served:
    """What the gateway needs to know of the repository it fronts."""

    def __init__(self, repo: Path) -> None:
        repo = Path(repo)
        m = read_manifest(repo)
        self.manifest = m
        self.name: str = m.name
        self.dim = m.dim
        self.buckets = list(m.buckets)
        self.max_len = m.max_seq_length
        self.overflow = m.overflow
        self.input_names = m.input_names
        self.output = m.encoder_output
        self.fused = m.pooler == "fused"
        self.pooling, self.normalize = m.pooling, m.normalize
        self.fixed_length = m.target == "tensorrt"    # engines have the sequence fixed at the bucket
        self.max_batch = {b: m.bucket_batch(b) for b in self.buckets}
        self.max_batch_size = m.max_batch_size         # the front door's
        from ...repository.config import parse_config

        door_cfg = parse_config(repo / self.name / "config.pbtxt")
        door = door_cfg.parameters
        # the front door reports each text's token count (repositories built before it did not): usage without
        # tokenizing here
        self.door_tokens = any(o.name == "TOKENS" for o in door_cfg.output)
        # the front door refuses longer texts (never cut by bytes); the gateway does so up front on every route
        self.max_text_bytes = int(door["max_text_bytes"].string_value) if "max_text_bytes" in door else 1 << 20
        self.identity = dict(m.identity)
        from ...common.backend import backend_lib

        text_mod, _ = backend_lib()
        self.tok = text_mod.TextTokenizer(str(repo / self.name / "1" / "tokenizer.json"), self.max_len, m.pad_id,
                                          self.overflow, m.overflow_stride)
        self.merge_windows, self.Encoded = text_mod.merge_windows, text_mod.Encoded
        self.vocab_size = self.tok.tok.get_vocab_size(with_added_tokens=True)
        from embtrt_backend.options import ModelOptions, load_calibration, prompt_length

        self.options = ModelOptions(dim=m.dim, normalize=m.normalize, prompts=dict(m.prompts),
                                    default_prompt_name=m.default_prompt_name, include_prompt=m.include_prompt,
                                    allowed_dimensions=m.dimensions, calibration=load_calibration(str(repo / self.name / "1")))
        self.prompt_tokens = {n: prompt_length(self.tok.tok, t) for n, t in self.options.prompts.items()}
