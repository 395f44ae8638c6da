"""What `embtrt bench` measures: a target's client (Triton gRPC, an OpenAI-compatible `/embeddings`
server) with one `embed(texts)` coroutine that fails unless every vector came back, and the
in-process lines (sentence-transformers; a repository's own encoder on its ONNX and tokenizer),
timed one request at a time in this process."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import orjson

from ..repository.manifest import read_manifest
from ..serve.wire import output_name, outputs, text_input


@dataclass
class Target:
    name: str
    kind: str          # triton | openai | inprocess
    url: str = ""
    model: str = ""
    pids: tuple[int, ...] = ()  # server processes to pause while another target is measured
    # request options sent with every request (Triton request parameters; fields of the OpenAI body)
    options: dict = field(default_factory=dict)
    # load generator processes (Triton targets): above 1, embtrt.measure.loadgen drives this target from that
    # many processes with every request built before the clock starts; 1: this process's asyncio driver
    processes: int = 1


class _Triton:
    def __init__(self, t: Target) -> None:
        import tritonclient.grpc.aio as aio

        self.t, self.c = t, aio.InferenceServerClient(t.url)

    async def embed(self, texts: list[str]) -> None:
        out = output_name(self.t.options)
        r = await self.c.infer(self.t.model, [text_input(texts)], client_timeout=120,
                               outputs=outputs(out), parameters=self.t.options or None)
        v = r.as_numpy(out)
        if v is None or v.shape[0] != len(texts):
            raise RuntimeError(f"expected {len(texts)} vectors, got {None if v is None else v.shape}")

    async def stats(self) -> dict[str, tuple[int, int, int]]:
        """model -> (request count, queue ns, compute-infer ns), summed over versions."""
        s = await self.c.get_inference_statistics(as_json=True)
        out = {}
        for m in s.get("model_stats", []):
            st = m.get("inference_stats", {})
            out[m["name"]] = (int(st.get("success", {}).get("count", 0)), int(st.get("queue", {}).get("ns", 0)),
                              int(st.get("compute_infer", {}).get("ns", 0)))
        return out

    async def close(self) -> None:
        await self.c.close()


class _OpenAI:
    def __init__(self, t: Target) -> None:
        import aiohttp

        self.t = t
        self.s = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        self.endpoint = t.url.rstrip("/") + "/embeddings"

    async def embed(self, texts: list[str]) -> None:
        # orjson both ways: the load generator shares the cores it measures, and the stdlib's parsing of a
        # float vector cost ~0.07 ms a request more than the gRPC client's binary tensor (2-core EPYC)
        payload = orjson.dumps({"model": self.t.model, "input": texts, **self.t.options})
        async with self.s.post(self.endpoint, data=payload, headers={"content-type": "application/json"}) as r:
            raw = await r.read()
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise RuntimeError(f"HTTP {r.status}: not JSON: {raw[:200]!r}") from None
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {str(body)[:200]}")
            if len(body.get("data", [])) != len(texts):
                raise RuntimeError(f"expected {len(texts)} vectors, got {len(body.get('data', []))}")

    async def stats(self) -> dict:
        return {}

    async def close(self) -> None:
        await self.s.close()


def client_for(t: Target) -> _Triton | _OpenAI:
    return _Triton(t) if t.kind == "triton" else _OpenAI(t)


def plans_of(rows: np.ndarray, per_req: int, n: int, seed: int) -> list[list[int]]:
    """n requests of per_req text indices drawn from rows (seeded: every target gets the same ones)."""
    rng = random.Random(seed)
    return [[int(rows[rng.randrange(rows.size)]) for _ in range(per_req)] for _ in range(n)]


def _timed(embed: Callable[[list[str]], object], texts: list[str], plans: list[list[int]],
           tokens: np.ndarray, warmup: int = 0) -> tuple[list[float], float, int]:
    """The first `warmup` plans embedded unmeasured, then each other plan in turn -> (latencies ms, wall seconds, tokens)."""
    for p in plans[:warmup]:
        embed([texts[j] for j in p])
    lat, n_tok = [], 0
    t0 = time.perf_counter()
    for p in plans[warmup:]:
        s = time.perf_counter()
        embed([texts[j] for j in p])
        lat.append((time.perf_counter() - s) * 1e3)
        n_tok += int(tokens[p].sum())
    return lat, time.perf_counter() - t0, n_tok


def _inprocess(texts: list[str], rows: np.ndarray, per_req: int, requests: int, warmup: int,
               seed: int, tokens: np.ndarray, st_model=None) -> tuple[list[float], float, int]:
    return _timed(lambda batch: st_model.encode(batch, batch_size=per_req), texts,
                  plans_of(rows, per_req, requests + warmup, seed), tokens, warmup)


class EncoderInProcess:
    """A repository's encoder in process, on its own ONNX and tokenizer: the hardware line.

    Same tokenizer, same graph and same texts as the served model: one request at a time
    (latency), and length-sorted batches of 32 texts (throughput). `runtime=None` runs ONNX
    Runtime fp32 (spinning threads, its fastest single-text setting); `runtime="repo"` runs the
    repository's own encoder exactly as its front door is configured (e.g. OpenVINO bf16)."""

    def __init__(self, repo: Path, threads: int = 0, runtime: str | None = None) -> None:
        from ..common.backend import backend_lib
        from ..repository.config import parse_config

        text_mod, enc_mod = backend_lib()
        m = read_manifest(repo)
        front = Path(repo) / m.name / "1"
        self.tok = text_mod.TextTokenizer(str(front / "tokenizer.json"), m.max_seq_length, m.pad_id)
        self.names = m.input_names
        if runtime == "repo":
            cfg = parse_config(Path(repo) / m.name / "config.pbtxt")
            params = {k: v.string_value for k, v in cfg.parameters.items()}
            self.enc = enc_mod.encoder_from_parameters(str(front), params)
            self.label = f"{params.get('runtime', 'onnxruntime')} {params.get('precision', 'fp32')}"
        else:
            onnx = front / "model.onnx" if (front / "model.onnx").is_file() else \
                Path(repo) / m.models.encoders[-1] / "1" / "model.onnx"
            self.enc = enc_mod.OrtEncoder(str(onnx), threads, spinning=True)
            self.label = "onnxruntime"

    def embed(self, texts: list[str]) -> None:
        e = self.tok.encode(texts)
        self.enc.run(self.tok.pad(e, list(range(len(texts))), int(e.lengths.max()), self.names))


def _encoder_inprocess(line: EncoderInProcess, texts: list[str], rows: np.ndarray, per_req: int, requests: int,
                       warmup: int, seed: int, tokens: np.ndarray
                       ) -> tuple[tuple[list[float], float, int], tuple[list[float], float, int]]:
    """(one request at a time, length-sorted batches of 32 of the same texts), each (latencies ms, seconds, tokens)."""
    plans = plans_of(rows, per_req, requests + warmup, seed)
    flat = sorted((j for p in plans[warmup:] for j in p), key=lambda j: tokens[j])
    batches = [flat[i:i + 32] for i in range(0, len(flat), 32)]
    # the batches run once unmeasured first: the first run of each new shape is slower
    return _timed(line.embed, texts, plans, tokens, warmup), _timed(line.embed, texts, batches * 2, tokens, len(batches))
