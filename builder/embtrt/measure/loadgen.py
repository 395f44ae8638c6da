"""A closed-loop load generator from several processes, lean enough to be shown not to be the limit.

    run(Job(url, model, payloads, concurrency=64, processes=4)) -> Outcome

`processes` worker processes (spawned, each with its own event loop and connections) share the
`concurrency` closed-loop workers between them; each worker sends its next request when its last one
is answered. Every request body is built before the clock starts (a gRPC `ModelInferRequest` message,
or an HTTP body with binary outputs), so a call costs the generator one send and one parse. The
processes start together (a barrier after their warm-up) and report their latencies, errors, their
CPU seconds and, where asked, the vectors (for a parity check of what was timed).

Protocols: "grpc" (KServe v2 over gRPC, the stubs in tritonclient, host:port) and "http" (KServe v2 over
HTTP/1.1 keep-alive, standard library only, http://host:port). The caller proves the generator was not
the limit by running the same job against a trivial model (`floor`) on the same machine: a generator
that drives it at >= 3x the rate it reported for the model under test was not what set that rate.
"""

from __future__ import annotations

import asyncio
import json
import resource
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HEADROOM = 3.0   # the floor's rate over the measured rate below which the generator may have been the limit


@dataclass(frozen=True)
class Job:
    url: str                          # grpc: host:port; http: http://host:port
    model: str
    payloads: tuple[tuple[str, ...], ...]   # the texts of each request, sent in order (cycled)
    requests: int                     # measured requests in all
    concurrency: int = 1
    processes: int = 1
    protocol: str = "grpc"
    warmup: int = 0                   # requests per process before the barrier, not measured
    output: str = "EMBEDDING"
    input_name: str = "TEXT"
    parameters: tuple[tuple[str, Any], ...] = ()   # request parameters (embtrt's request options)
    keep: bool = False                # return each measured request's output (by request index)
    timeout_s: float = 120.0


@dataclass
class Outcome:
    latencies_s: list[float]
    wall_s: float
    client_cpu_s: float               # every generator process, over the measured window
    processes: int
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    outputs: dict[int, np.ndarray] = field(default_factory=dict)
    indices: list[int] = field(default_factory=list)   # the request index of each latency, in the same order
    warmup_sent: int = 0                               # warm-up requests sent before this round (the first: the job's)

    @property
    def req_per_s(self) -> float:
        return len(self.latencies_s) / self.wall_s if self.wall_s else 0.0

    def percentile_ms(self, q: float) -> float | None:
        if not self.latencies_s:
            return None
        return float(np.percentile(np.asarray(self.latencies_s) * 1e3, q, method="nearest"))

    @property
    def client_busy(self) -> float:
        """The generator processes' CPU over their wall time: near 1.0, a process was saturated."""
        return self.client_cpu_s / (self.wall_s * self.processes) if self.wall_s else 0.0

    @property
    def client_cpu_ms_per_req(self) -> float:
        n = len(self.latencies_s) + self.errors
        return 1e3 * self.client_cpu_s / n if n else 0.0


def bytes_tensor(texts: tuple[str, ...] | list[str]) -> bytes:
    """Triton's BYTES serialization: each element a 4-byte little-endian length and its bytes."""
    parts = []
    for t in texts:
        b = t.encode("utf-8")
        parts += [struct.pack("<I", len(b)), b]
    return b"".join(parts)


# ---- one protocol each: build every request first, then send / parse --------------------------------------
class _Grpc:
    def __init__(self, job: Job) -> None:
        import grpc

        from ..repository.proto import grpc_service

        service_pb2, service_pb2_grpc = grpc_service()
        self.pb = service_pb2
        self.channel = grpc.aio.insecure_channel(job.url, options=[("grpc.max_receive_message_length", 1 << 30),
                                                                    ("grpc.max_send_message_length", 1 << 30)])
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.job = job
        self.bodies = [self._request(p) for p in job.payloads]

    def _request(self, texts: tuple[str, ...]):
        job, pb = self.job, self.pb
        r = pb.ModelInferRequest(model_name=job.model)
        r.inputs.add(name=job.input_name, datatype="BYTES", shape=[len(texts), 1])
        r.raw_input_contents.append(bytes_tensor(texts))
        r.outputs.add(name=job.output)
        for k, v in job.parameters:
            if isinstance(v, bool):
                r.parameters[k].bool_param = v
            elif isinstance(v, int):
                r.parameters[k].int64_param = v
            else:
                r.parameters[k].string_param = str(v)
        return r

    async def call(self, i: int, keep: bool) -> np.ndarray | None:
        resp = await self.stub.ModelInfer(self.bodies[i % len(self.bodies)], timeout=self.job.timeout_s)
        if not keep:
            return None
        o = resp.outputs[0]
        return np.frombuffer(resp.raw_output_contents[0], dtype=_DTYPES[o.datatype]).reshape(tuple(o.shape))

    async def close(self) -> None:
        await self.channel.close()


_DTYPES = {"FP32": np.float32, "FP16": np.float16, "INT8": np.int8, "UINT8": np.uint8, "INT64": np.int64}


class _Http:
    """KServe v2 over HTTP/1.1 on one keep-alive connection per worker, outputs as binary data."""

    def __init__(self, job: Job) -> None:
        from urllib.parse import urlsplit

        u = urlsplit(job.url if "://" in job.url else f"http://{job.url}")
        self.host, self.port, self.job = u.hostname or "127.0.0.1", u.port or 80, job
        self.bodies = [self._request(p) for p in job.payloads]
        self.conns: list = []

    def _request(self, texts: tuple[str, ...]) -> bytes:
        job = self.job
        body = json.dumps({"inputs": [{"name": job.input_name, "shape": [len(texts), 1], "datatype": "BYTES",
                                       "data": list(texts)}],
                           "outputs": [{"name": job.output, "parameters": {"binary_data": True}}],
                           **({"parameters": dict(job.parameters)} if job.parameters else {})}).encode()
        head = (f"POST /v2/models/{job.model}/infer HTTP/1.1\r\nHost: {self.host}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        return head + body

    async def connect(self) -> "_Conn":
        return _Conn(self.host, self.port)

    async def call_on(self, conn: "_Conn", i: int, keep: bool) -> np.ndarray | None:
        """One request on the worker's connection (made again after any failure: a half-read response
        would misalign every later one), within the job's timeout."""
        try:
            return await asyncio.wait_for(self._call(conn, i, keep), self.job.timeout_s)
        except BaseException:
            conn.close()
            raise

    async def _call(self, conn: "_Conn", i: int, keep: bool) -> np.ndarray | None:
        reader, writer = await conn.streams()
        writer.write(self.bodies[i % len(self.bodies)])
        status = await reader.readline()
        if not status:
            raise ConnectionError("the server closed the connection")
        headers = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if "content-length" not in headers:   # Triton always sends one; a chunked body is not read here
            raise RuntimeError(f"{status.decode(errors='replace').strip()}: a response without Content-Length "
                               f"({headers.get('transfer-encoding', 'no length')})")
        body = await reader.readexactly(int(headers["content-length"]))
        if not status.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{status.decode().strip()}: {body[:300].decode(errors='replace')}")
        if headers.get("connection", "").lower() == "close":
            conn.close()
        if not keep:
            return None
        n = int(headers.get("inference-header-content-length", len(body)))
        out = json.loads(body[:n])["outputs"][0]
        return np.frombuffer(body[n:], dtype=_DTYPES[out["datatype"]]).reshape(out["shape"])


class _Conn:
    """A keep-alive connection, opened on first use and again after it is closed."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.rw: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def streams(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.rw is None:
            self.rw = await asyncio.open_connection(self.host, self.port)
        return self.rw

    def close(self) -> None:
        if self.rw is not None:
            self.rw[1].close()
            self.rw = None


# ---- one process ------------------------------------------------------------------------------------------
def _share(total: int, parts: int, k: int) -> int:
    return total // parts + (1 if k < total % parts else 0)


async def _round(job: Job, mine: list[int], calls: list) -> tuple[list[tuple[int, float]], list[str], dict[int, np.ndarray]]:
    """One measured round of a process: its requests from its workers -> ((index, latency)s, errors, outputs)."""
    lat: list[tuple[int, float]] = []
    errors: list[str] = []
    outputs: dict[int, np.ndarray] = {}
    queue = iter(mine)

    async def worker(call) -> None:
        for i in queue:
            t0 = time.perf_counter()
            try:
                v = await call(i, job.keep)
            except Exception as exc:  # counted, sampled: a failed request is a result of the run
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            lat.append((i, time.perf_counter() - t0))
            if v is not None:
                outputs[i] = v

    await asyncio.gather(*(worker(call) for call in calls))
    return lat, errors, outputs


async def _process(job: Job, k: int, rounds: int, ready, go, send) -> None:
    """Process k's share, `rounds` times: warm up once; per round `ready()`, wait for `go()`, run,
    `send((start, end, cpu_s, latencies, errors, outputs))`."""
    conc = _share(job.concurrency, job.processes, k)
    first = sum(_share(job.concurrency, job.processes, j) for j in range(k))   # this process's first worker
    client: Any = _Grpc(job) if job.protocol == "grpc" else _Http(job)
    conns = [await client.connect() for _ in range(conc)] if job.protocol == "http" else [None] * conc
    calls = [(lambda i, keep, c=c: client.call_on(c, i, keep)) if c else client.call for c in conns]
    try:
        warms = [_share(job.warmup, job.concurrency, first + w) for w in range(conc)]   # the job's warm-up, exactly

        async def warm_up(call, n: int, w: int) -> None:   # each worker's connection, one request at a time
            for i in range(n):
                await call(first + w + i * job.concurrency, False)

        await asyncio.gather(*(warm_up(call, n, w) for w, (call, n) in enumerate(zip(calls, warms, strict=True))))
        loop = asyncio.get_running_loop()
        # the requests of this process's workers: each worker's share of the job, as if one process ran them all
        mine = [i for i in range(job.requests) if first <= i % job.concurrency < first + conc]
        for r in range(rounds):
            await loop.run_in_executor(None, ready)
            await loop.run_in_executor(None, go)
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.clock_gettime(time.CLOCK_MONOTONIC)
            lat, errors, outputs = await _round(job, mine, calls)
            t1, r1 = time.clock_gettime(time.CLOCK_MONOTONIC), resource.getrusage(resource.RUSAGE_SELF)
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            send(("ok", (t0, t1, cpu, lat, errors, outputs, sum(warms) if r == 0 else 0)))
    finally:
        for c in conns:
            if c:
                c.close()
        if job.protocol == "grpc":
            await client.close()


def _child(k: int) -> None:
    """A generator process (python -m embtrt.measure.loadgen K): (job, rounds) pickled on stdin; per round
    ("ready",) on stdout once warm, a line on stdin to start, then ("ok", result); ("error", why) instead of
    either when it fails. Everything on stdout is pickled."""
    import pickle
    import sys

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    job, rounds = pickle.load(stdin)

    def send(result) -> None:
        pickle.dump(result, stdout)
        stdout.flush()

    try:
        asyncio.run(_process(job, k, rounds, lambda: send(("ready",)), stdin.readline, send))
    except BaseException as exc:  # reported to the parent, which fails the run with it
        send(("error", f"generator process {k}: {type(exc).__name__}: {exc}"[:1000]))


def run(job: Job) -> Outcome:
    """Run the job's requests from its processes; -> the measured outcome."""
    return run_rounds(job, 1)[0]


def run_rounds(job: Job, rounds: int) -> list[Outcome]:
    """The job's requests `rounds` times in a row from the same processes (warmed up once, every round
    started together): one outcome per round, for a median and a spread."""
    import os
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    if job.protocol not in ("grpc", "http"):
        raise ValueError(f"protocol {job.protocol!r}: grpc or http")
    procs = max(1, min(job.processes, job.concurrency))
    job = Job(**{**job.__dict__, "processes": procs})
    env = dict(os.environ)
    pkg_root = str(Path(__file__).resolve().parents[2])   # the folder holding the embtrt package
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    children = [subprocess.Popen([sys.executable, "-m", "embtrt.measure.loadgen", str(k)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, env=env) for k in range(procs)]

    def say(c, data: bytes) -> None:
        assert c.stdin is not None
        c.stdin.write(data)
        c.stdin.flush()

    def receive(c) -> tuple:
        try:
            return pickle.load(c.stdout)
        except Exception:  # noqa: BLE001 (the child died without a word)
            return ("error", f"a generator process exited with {c.wait()} before its result")

    out: list[Outcome] = []
    try:
        for c in children:
            say(c, pickle.dumps((job, rounds)))
        for _ in range(rounds):
            said = [receive(c) for c in children]   # each says ready (warmed up), or why it failed
            bad = [m[1] for m in said if m[0] != "ready"]
            if bad:
                raise RuntimeError("; ".join(bad))
            for c in children:   # the start, as close together as the pipes allow
                say(c, b"go\n")
            got = [receive(c) for c in children]
            errs = [g[1] for g in got if g[0] != "ok"]
            if errs:
                raise RuntimeError("; ".join(errs))
            rows = [g[1] for g in got]
            o = Outcome([], max(r[1] for r in rows) - min(r[0] for r in rows), sum(r[2] for r in rows), procs,
                        warmup_sent=sum(r[6] for r in rows))
            for _, _, _, lat, errors, outputs, _ in rows:
                o.latencies_s += [x for _, x in lat]
                o.indices += [i for i, _ in lat]
                o.errors += len(errors)
                o.error_samples = (o.error_samples + errors)[:5]
                o.outputs.update(outputs)
            out.append(o)
    finally:
        for c in children:
            try:
                c.wait(timeout=5 if out and len(out) == rounds else 0.1)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait()
    return out


if __name__ == "__main__":
    import sys as _sys

    _child(int(_sys.argv[1]))
