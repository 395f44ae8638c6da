"""The embedder's detection rule, the registry's last: every folder no other kind's rule claimed is an
embedder (a SentenceTransformer folder, or a transformers encoder pooled as the build is told)."""

from __future__ import annotations

from pathlib import Path

from ...common.files import json_object
from ...errors import SpecError
from ...reference.detect import st_model_type


def embedder_rule(path: Path) -> tuple[bool, str]:
    """Detection (embtrt_backend.kinds.DETECTION): matches every folder; says what it is."""
    path = Path(path)
    if st_model_type(path) == "SentenceTransformer" or (path / "modules.json").is_file():
        return True, "a sentence-transformers SentenceTransformer folder"
    archs = [a for a in json_object(path / "config.json").get("architectures") or [] if isinstance(a, str)]
    causal = [a for a in archs if a.endswith("ForCausalLM")]
    if causal:
        # a decoder embedder (Qwen3-Embedding) says how it pools in modules.json; without it, a causal LM is most
        # likely an LLM-style reranker (Qwen3-Reranker: the "yes" and "no" logits of its LM head), which pooling its
        # hidden states would serve as vectors that are not its output (it was built as an embedder until #71)
        raise SpecError(f"{path} is a causal language model ({causal[0]}) without sentence-transformers' modules.json: "
                        "not an embedder as it is, and not an LLM-style reranker either (its tokenizer.json has no 'yes' "
                        "and 'no' tokens for Qwen3-Reranker's scoring)",
                        "for a decoder embedding model, add its modules.json and pooling (as sentence-transformers "
                        "saves it); for a reranker, its sequence-classification conversion (one label) builds as a reranker")
    return True, f"config.json names {', '.join(archs) or 'no architecture'} (an encoder)"
