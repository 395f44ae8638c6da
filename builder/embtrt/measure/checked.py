"""Requests whose every vector is checked against the same text's vector embedded alone (the stress
matrix's cells), over the one load driver: request i of a `Checked` sends text i % len(texts) to
its model; the vector is kept (no reference yet: embedding alone) or its cosine to the text's
unloaded vector recorded, after its latency is taken."""

from __future__ import annotations

import numpy as np

from ..serve import wire
from .driver import Load, drive


class Checked:
    """Requests of one kind (model, texts with their unloaded vectors) and what came back: request i sends
    text i % len(texts); its vector is kept (no reference) or compared with the text's unloaded one."""

    def __init__(self, model: str, texts: list[str], tokens: list[int], ref: np.ndarray | None) -> None:
        self.model, self.texts, self.tokens, self.ref = model, texts, tokens, ref
        self.lat: list[float] = []
        self.cos: list[float] = []
        self.vecs: dict[int, np.ndarray] = {}   # text index -> vector, kept where there is no reference
        self.tok = 0
        self.run: Load | None = None

    @property
    def errors(self) -> list[str]:
        return [f.message[:300] for f in self.run.failures] if self.run else []

    @property
    def done(self) -> int:
        return self.run.done if self.run else 0

    def load(self, client, n: int | None, conc: int, timeout_s: float, until=None) -> Load:
        async def call(i: int) -> np.ndarray:
            r = await client.infer(self.model, [wire.text_input([self.texts[i % len(self.texts)]])],
                                   outputs=wire.outputs("EMBEDDING"), client_timeout=timeout_s)
            return r.as_numpy("EMBEDDING")[0].astype(np.float64)

        def got(i: int, v: np.ndarray) -> None:
            k = i % len(self.texts)
            assert self.run is not None  # set before the load starts calling back
            self.lat.append(self.run.latencies[i])
            self.tok += self.tokens[k]
            if self.ref is None:  # embedding alone: the vector is the reference of the loaded cells
                self.vecs[k] = v
            else:
                ref = self.ref[k]
                self.cos.append(float(v @ ref / max(np.linalg.norm(v) * np.linalg.norm(ref), 1e-12)))

        self.run = Load(call, n, conc, until=until, on_result=got)
        return self.run


async def drive_checked(url: str, calls: Checked, n: int | None, conc: int, timeout_s: float,
                        beside: tuple[tuple[str, Checked, int], ...] = (), lead_s: float = 0.0,
                        until=None) -> tuple[Load, list[Load]]:
    """`calls` n times (None: until `until()`) at concurrency conc on `url`, with background loads
    (url, calls, concurrency) started lead_s before it and running until it ends; -> the loads."""
    import tritonclient.grpc.aio as aio

    clients: list = []

    def load(u: str, c: Checked, n: int | None, k: int, until=None) -> Load:
        clients.append(aio.InferenceServerClient(u))
        return c.load(clients[-1], n, k, timeout_s, until)

    fg = load(url, calls, n, conc, until)
    bg = [load(u, c, None, k) for u, c, k in beside]
    try:
        await drive(fg, bg, lead_s)
    finally:
        for client in clients:
            await client.close()
    return fg, bg


async def beside(url: str, short: Checked, long_url: str, long: Checked, conc: int, n: int, timeout_s: float) -> float:
    """Short requests at concurrency conc while two streams of long ones run, until at least n short
    and two long requests are done (so that the short ones really ran beside long ones); -> the short
    load's wall seconds."""
    fg, _ = await drive_checked(url, short, None, conc, timeout_s, beside=((long_url, long, 2),), lead_s=0.2,
                                until=lambda: short.done >= n and long.done >= 2)
    return fg.seconds
