"""Body fields the gateway does not read: ignored, as the anchors' own servers ignore fields they do not
know (TEI, vLLM, infinity), so that a client's extra fields for those servers keep working; but a field
a letter or two away from an option the gateway reads (`dimension`, `prompt_nme`) is refused naming the
option it resembles, since ignoring it would serve the default (the full width, no prompt) as if the
option had been applied. (OpenAI's hosted API refuses every unknown field; vLLM's /v1/embeddings,
which OpenAI clients of self-hosted models call, ignores them with a warning.)"""

from __future__ import annotations

import difflib
from typing import Any

from embtrt_backend.options import OPTION_NAMES

from .errors import ApiError

# what changes the answer: a near miss of one of these is refused
OPTIONS = frozenset({*OPTION_NAMES, "encoding_format", "normalize", "truncation_direction", "output_dimension",
                     "embedding_types", "top_n", "return_documents", "raw_scores", "return_text", "input_type",
                     "prompt_name", "dimensions", "truncate", "truncate_prompt_tokens", "add_special_tokens",
                     "return_dense", "return_sparse", "return_colbert_vecs", "function_to_apply", "use_activation",
                     "modality", "top_k", "late_chunking", "chunk_spans"})
# the other fields some dialect's parser reads (never a near miss, whatever they resemble)
READ = frozenset({"model", "input", "inputs", "texts", "documents", "passages", "query", "images", "messages",
                  "content", "prompt", "parameters", "task", "ids", "tokens", "user", "embedding_mode",
                  "embed_dtype", "max_tokens", "sentences", "source_sentence", "text", "text_1", "text_2",
                  "data_1", "data_2", "return_tokens", "return_token_strs", "skip_special_tokens", "document",
                  "rank_fields", "max_tokens_per_doc", "max_chunks_per_doc", "priority", "request_id"})


def refuse_misspelt(body: Any) -> None:
    """A 400 naming the first top-level field of a JSON object body that is no field the gateway reads but
    resembles an option (difflib ratio >= 0.85: one or two letters off); other unknown fields pass."""
    if not isinstance(body, dict):
        return
    for key in body:
        if not isinstance(key, str) or key in OPTIONS or key in READ:
            continue
        near = difflib.get_close_matches(key, OPTIONS, n=1, cutoff=0.85)
        if near:
            raise ApiError(400, f"unknown parameter {key!r}: did you mean {near[0]!r}? (a misspelt option is "
                           "refused, never ignored: the default would be served as if it had been applied)",
                           param=key)
