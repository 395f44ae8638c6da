"""What the gateway knows of one repository it fronts: the manifest's shape of the model, the
front door's limits, the served tokenizer and the model's request options. `ServedModel` is what
every kind has; `Served` (an embedder), `ServedReranker` and `ServedSparse` add their kind's. The
manifest's `kind` says which (`served_kind`)."""

from __future__ import annotations

from pathlib import Path

from ...repository.manifest import read_manifest


class ServedModel:
    """Every kind's: the manifest, the front door's name, buckets, max length and batch, the
    identity, the front door's config parameters and its text limit."""

    def __init__(self, repo: Path) -> None:
        from ...repository.config import parse_config

        repo = Path(repo)
        m = read_manifest(repo)
        self.manifest = m
        self.name: str = m.name
        self.buckets = list(m.buckets)
        self.max_len = m.max_seq_length
        self.max_batch_size = m.max_batch_size         # the front door's: larger requests go up in parts
        self.identity = dict(m.identity)
        self.door_config = parse_config(repo / self.name / "config.pbtxt")
        self.door = {k: v.string_value for k, v in self.door_config.parameters.items()}
        # the front door refuses longer texts (never cut by bytes); the gateway does so up front on every route
        self.max_text_bytes = int(self.door.get("max_text_bytes", str(1 << 20)))
        self.folder = repo / self.name / "1"           # the front door's own files (tokenizer, calibration)
        self._plain = None

    @property
    def plain_tokenizer(self):
        """The front door's tokenizer.json as it is (no truncation, no padding): the tokenize routes'."""
        if self._plain is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
            tok.no_truncation()
            tok.no_padding()
            self._plain = tok
        return self._plain


class Served(ServedModel):
    """An embedder: its dimension, inputs and pooling, and the front door's own request core."""

    def __init__(self, repo: Path) -> None:
        super().__init__(repo)
        m = self.manifest
        self.output = m.encoder_output
        self.max_batch = {b: m.bucket_batch(b) for b in self.buckets}
        # the front door reports each text's token count (repositories built before it did not): usage without
        # tokenizing here
        self.door_tokens = any(o.name == "TOKENS" for o in self.door_config.output)
        from embtrt_backend.core import RequestCore
        from embtrt_backend.options import load_calibration

        # the front door's own request core, from its own config: the token-id route plans, pads and pools
        # exactly as the front door does
        folder = str(self.folder)
        self.core = RequestCore.from_folder(folder, {"overflow": m.overflow, "overflow_stride": str(m.overflow_stride),
                                                     **self.door}, load_calibration(folder))
        self.tok = self.core.tokenizer
        self.options = self.core.options
        self.vocab_size = self.tok.tok.get_vocab_size(with_added_tokens=True)


def served_kind(repo: Path) -> str:
    """The kind of model the repository serves, as its manifest records it (embtrt_backend.kinds)."""
    return read_manifest(Path(repo)).kind


class ServedReranker(ServedModel):
    """A reranker: the model's labels and default activation, and the served tokenizer (pair
    truncation at the max length), to count a large request's tokens exactly before it goes up
    (admission)."""

    def __init__(self, repo: Path) -> None:
        super().__init__(repo)
        self.num_labels = int(self.manifest.num_labels or 1)
        self.activation = self.manifest.activation
        self.labels = [f"LABEL_{i}" for i in range(self.num_labels)]   # transformers' default names (TEI's /predict)
        from embtrt_backend.pair_template import PairTemplate

        # an LLM-style reranker's prompt template (its pairs are counted through it; requests may give an instruction)
        self.template = PairTemplate.from_json(str(self.manifest.extra.get("spec", {}).get("pair_template") or ""))
        self._tokenizer_file = self.folder / "tokenizer.json"
        self._tok = None

    @property
    def tokenizer(self):
        """The front door's own pair tokenizer (embtrt_backend.pairs.PairTokenizer: CrossEncoder's pair
        truncation), loaded on first use; None where the repository has none."""
        if self._tok is None and self._tokenizer_file.is_file():
            from embtrt_backend.pairs import PairTokenizer

            self._tok = PairTokenizer(str(self._tokenizer_file), self.max_len, self.manifest.pad_id)
        return self._tok


class ServedSparse(ServedModel):
    """A sparse encoder: the vocabulary (the manifest's dim), and the front door's own request core
    (its options resolve a request's prompt and truncation; its prepare counts a large request's
    tokens before it goes up)."""

    def __init__(self, repo: Path) -> None:
        super().__init__(repo)
        from embtrt_backend.core import RequestCore

        self.dim = self.manifest.dim                   # the vocabulary: one weight per token
        self.core = RequestCore.from_folder(str(self.folder), self.door)   # as the front door makes it
        self.options = self.core.options

    def token_of(self, index: int) -> str | None:
        """A vocabulary index's token string (the model's tokenizer), as SparseEncoder.decode names it."""
        return self.core.tokenizer.tok.id_to_token(index)
