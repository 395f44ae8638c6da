"""Admission control: the gateway takes only work it can finish.

- per request: at most `max_request_chars` characters of text (a rerank request's pairs: the query
  once per document, and the documents) and `max_request_tokens` tokens
  (413 naming the cap). Tokens are bounded without tokenizing where the text is short enough for
  the bound to prove it (a token covers at least one UTF-8 byte, plus each text's special and
  prompt tokens); otherwise the request is tokenized (off the event loop) and counted exactly;
- at most `max_concurrent` requests at once (429 with Retry-After beyond it);
- CPU work on large inputs (JSON parsing, tokenization, planning) runs in a small thread pool,
  never on the event loop, so a maximal request cannot stall the others.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ...errors import SpecError
from .errors import ApiError

# work on fewer bytes than this stays on the loop: a thread hop costs more than it saves
OFFLOAD_BYTES = 32 << 10


@dataclass(frozen=True)
class AdmissionConfig:
    max_request_chars: int = 2_000_000
    max_request_tokens: int = 262_144
    max_concurrent: int = 256
    cpu_threads: int = 2

    def __post_init__(self) -> None:
        for name, low in (("max_request_chars", 1), ("max_request_tokens", 1), ("max_concurrent", 1), ("cpu_threads", 1)):
            if int(getattr(self, name)) < low:
                raise SpecError(f"invalid {name}: {getattr(self, name)}", f"an integer >= {low}")


class Admission:
    def __init__(self, cfg: AdmissionConfig) -> None:
        self.cfg = cfg
        self.active = 0
        self.pool = ThreadPoolExecutor(max_workers=cfg.cpu_threads, thread_name_prefix="embtrt-gateway-cpu")

    def enter(self) -> None:
        if self.active >= self.cfg.max_concurrent:
            raise ApiError(429, f"the gateway is serving its limit of {self.cfg.max_concurrent} concurrent requests; "
                           "retry shortly", type_="rate_limit_error", code="too_many_requests", retry_after=1)
        self.active += 1

    def leave(self) -> None:
        self.active -= 1

    async def offload(self, size: int, fn, *args):
        """fn(*args) in the CPU pool when the input is large (`size` bytes), else here."""
        if size < OFFLOAD_BYTES:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def check_chars(self, texts: list[str]) -> int:
        """The request's characters; 413 over the cap."""
        return self.check_count(sum(map(len, texts)))

    def check_count(self, n: int, param: str = "input") -> int:
        """`n` characters of input (a rerank request: the query once per document, and the documents); 413
        over the cap."""
        if n > self.cfg.max_request_chars:
            raise ApiError(413, f"the input has {n} characters; this gateway takes at most {self.cfg.max_request_chars} "
                           "per request (--max-request-chars): split it", param=param, code="request_too_large")
        return n

    @staticmethod
    def token_bound(texts: list[str], per_text: int, max_len: int | None) -> int:
        """An upper bound of the tokens these texts are embedded as, without tokenizing: a character is
        at most 4 UTF-8 bytes and a token covers at least one, plus `per_text` special and prompt
        tokens each, and at most `max_len` a text where the request's truncation cuts (None: it does not)."""
        total = 0
        for t in texts:
            n = 4 * len(t) + per_text
            total += n if max_len is None else min(n, max_len)
        return total

    def check_tokens(self, tokens: int, param: str = "input") -> None:
        if tokens > self.cfg.max_request_tokens:
            raise ApiError(413, f"the input has {tokens} tokens; this gateway takes at most {self.cfg.max_request_tokens} "
                           "per request (--max-request-tokens): split it", param=param, code="request_too_large")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
