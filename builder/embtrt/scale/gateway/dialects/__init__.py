"""The API dialects (#51, #69 item 3): one module per API family, each holding that family's request shapes
of every operation it has and its error body. A route speaks one dialect (route_table.py); an error on it
is answered in its family's shape, so the anchor's own client reads it as it reads the anchor's:

- `openai`: OpenAI's shapes, and infinity's (its /embeddings and /rerank bodies are OpenAI's and Cohere's);
  `{"error": {message, type, param, code}}` with the gateway's status, also for NIM's and embtrt's routes;
- `tei`: Hugging Face TEI 1.9's (`tei`, `tei-all`, `tei-similarity`, `tei-text`);
- `cohere`: Cohere's embed and rerank APIs (`cohere-v1`, `cohere-v2`, `cohere`: also Jina's and vLLM's rerank body);
- `vllm`: vLLM's (`vllm`, `vllm-score`, `vllm-pooling`);
- `nim`: NVIDIA NIM's; `embtrt`: embtrt's own.

A parser that recognises another anchor's body on a shared path (vLLM's /rerank or /tokenize body) sets the
error's `dialect`; otherwise a body that cannot be parsed gets the path's own.
"""

from __future__ import annotations

from ..errors import ApiError
from ..operation import Shape
from . import cohere, embtrt, nim, openai, tei, vllm

# where each dialect's body holds its items: a rerank body's documents, a sparse body's texts (the field a
# served model's refusal of one item names)
DOC_FIELDS = {"cohere": "documents", "tei": "texts", "nim": "passages"}
INPUT_FIELDS = {"tei": "inputs", "embtrt": "input"}
# the dialects of TEI's model routes, which send its x-compute-* headers (its /tokenize and /decode send none)
TIMED = frozenset({"tei", "tei-all", "tei-similarity"})
# every (operation, dialect) shape the families hold: the route table's rows parse with the path's dialect, and a
# request answers with its own `api` (vLLM's body on TEI's /rerank parses as Cohere's and answers so)
SHAPES: dict[tuple[str, str], Shape] = {k: v for m in (openai, tei, cohere, vllm, nim, embtrt) for k, v in getattr(m, "SHAPES", {}).items()}
_ERRORS = {"tei": tei.error, "cohere": cohere.error, "vllm": vllm.error, "openai": openai.error}


def family(dialect: str) -> str:
    """tei | cohere | vllm | openai: whose error shape a dialect answers in."""
    for f in ("tei", "cohere-", "vllm"):
        if dialect.startswith(f):
            return f.rstrip("-")
    return "openai"


def render_error(exc: ApiError, dialect: str) -> tuple[int, dict]:
    """(status, body) of an error on a route of `dialect` (the error's own dialect first, where its parser set one)."""
    return _ERRORS[family(exc.dialect or dialect)](exc)
