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
        door = {k: v.string_value for k, v in door_cfg.parameters.items()}
        # the front door reports each text's token count (repositories built before it did not): usage without
        # tokenizing here
        self.door_tokens = any(o.name == "TOKENS" for o in door_cfg.output)
        # the front door refuses longer texts (never cut by bytes); the gateway does so up front on every route
        self.max_text_bytes = int(door.get("max_text_bytes", str(1 << 20)))
        self.identity = dict(m.identity)
        from embtrt_backend.core import RequestCore
        from embtrt_backend.options import load_calibration

        # the front door's own request core, from its own config: the token-id route plans, pads and pools
        # exactly as the front door does
        folder = str(repo / self.name / "1")
        self.core = RequestCore.from_folder(folder, {"overflow": m.overflow, "overflow_stride": str(m.overflow_stride),
                                                     **door}, load_calibration(folder))
        self.tok = self.core.tokenizer
        self.options = self.core.options
        self.vocab_size = self.tok.tok.get_vocab_size(with_added_tokens=True)
