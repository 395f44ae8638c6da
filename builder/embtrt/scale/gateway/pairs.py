"""The pair input and the scores head at the gateway (a part: the reranker's and the classifier's gateway
models are built of it): a request's rows counted against the token cap before they go up, and TEI's
/info labels of a model scoring per label."""

from __future__ import annotations

from collections.abc import Sequence

from embtrt_backend.pairs import DEFAULT

from .errors import ApiError
from .model import GatewayModel


async def check_row_tokens(model: GatewayModel, rows: Sequence[tuple[str, str | None]], field: str) -> None:
    """The token cap (--max-request-tokens) of rows of a pair-core model (a reranker's pairs, a classifier's
    texts and pairs; a row's second text None: a single text): a row is at most the max length (cut, or
    refused by the front door with truncate false), and a token covers at least one UTF-8 byte; where that
    bound does not prove the request under the cap, the rows are tokenized here by the front door's own
    tokenizer (off the loop) and counted."""
    s, cap = model.served, model.admission.cfg.max_request_tokens
    # each row: its texts' bytes and its special tokens ([CLS] q [SEP] d [SEP], <s> ..)
    bound = sum(min(4 * len(a) + 4 + 4 * len(b or ""), s.max_len) for a, b in rows)
    if bound <= cap:
        return
    tok = s.tokenizer
    if tok is None:  # no tokenizer to count with: the bound decides
        raise ApiError(413, f"the input may be up to {bound} tokens; this gateway takes at most {cap} per request "
                       "(--max-request-tokens): split it", param=field, code="request_too_large")

    def count() -> int:   # single texts alone, pairs as pairs (as the front door tokenizes them)
        singles = [a for a, b in rows if b is None]
        pairs = [(a, b) for a, b in rows if b is not None]
        template = getattr(s, "template", None)   # an LLM-style reranker's pairs: through its prompt template
        encode = (lambda q, d: tok.encode_template(template, q, d, DEFAULT)) if template is not None else \
            (lambda q, d: tok.encode(q, d, DEFAULT))
        return ((int(tok.encode(singles, None, DEFAULT).lengths.sum()) if singles else 0)
                + (int(encode([a for a, _ in pairs], [b for _, b in pairs]).lengths.sum()) if pairs else 0))

    model.admission.check_tokens(await model.admission.offload(sum(len(a) + len(b or "") for a, b in rows), count), field)


def tei_labels(kind, labels: list[str]) -> dict:
    """TEI's /info model_type of a model scoring per label: {its kind's name (TEI's tag): {id2label, label2id}}."""
    return {kind.name: {"id2label": {str(i): n for i, n in enumerate(labels)}, "label2id": {n: i for i, n in enumerate(labels)}}}
