"""Connection hygiene for the gateway's HTTP server: header, body and idle timeouts and a connection cap.

uvicorn alone keeps a connection that never finishes its request line and headers open forever,
and starts no clock while a body trickles in. Here:
- header timeout: a connection (new, or kept alive between requests) that has begun a request must
  finish its headers within `header_timeout_s`, and a new connection must begin one within it, or
  it is closed;
- idle timeout: a kept-alive connection with no request in progress is closed after `idle_timeout_s`
  (uvicorn's keep-alive timeout);
- body timeout: the application reads a body within `body_timeout_s` (see http.py), else 408 and
  the connection is closed;
- connection cap: at most `max_connections` connections and requests at once (uvicorn's
  limit_concurrency answers 503 beyond it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 5.0
    max_connections: int = 1024


def protocol_class(header_timeout_s: float):
    """uvicorn's httptools protocol with a header timeout."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()  # a new connection must begin (and finish) a request's headers in time

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:  # a kept-alive connection starting its next request
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedHttpToolsProtocol


def uvicorn_options(limits: Limits) -> dict:
    """Keyword arguments of uvicorn.Config / uvicorn.run that enforce the limits."""
    return {"http": protocol_class(limits.header_timeout_s), "timeout_keep_alive": max(1, round(limits.idle_timeout_s)),
            "limit_concurrency": limits.max_connections}
