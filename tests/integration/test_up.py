"""#73: `embtrt up`: a model folder of one's own to an HTTP endpoint in one command. The openai client and
tritonclient gRPC get SentenceTransformer.encode's vectors; one Ctrl-C leaves nothing running (the ports
free, tritonserver and its stubs gone, their /dev/shm regions removed); a second start reuses the build.
Real tritonserver and gateway on 127.0.0.1, free ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embtrt.serve.client import EmbeddingClient
from embtrt.serve.ports import listening_pids, refuse_taken
from embtrt.serve.server import free_port
from waiting import until

pytestmark = pytest.mark.integration
EMBTRT = str(Path(sys.executable).parent / "embtrt")
TEXTS = ["a cat sat on the mat", "stock markets fell sharply today", "the recipe needs two eggs and flour"]


def _shm() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("triton_python_backend_shm")}


def _mapped_shm(pids) -> set[str]:
    """The Python backend's /dev/shm regions that tritonserver `pids` and their children (the stubs) have mapped:
    this server's own, not those of servers another test worker starts meanwhile."""
    procs = set(pids)
    for pid in pids:
        try:
            procs |= set(map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split()))
        except OSError:
            pass
    names: set[str] = set()
    for pid in procs:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names |= {line.rsplit("/", 1)[1] for line in maps.splitlines() if "/dev/shm/triton_python_backend_shm" in line}
    return names


class Up:
    def __init__(self, folder: Path, tmp: Path, *args: str) -> None:
        self.port, self.grpc = free_port(), free_port()
        self.log = tmp / f"up-{self.port}.log"
        env = {**os.environ, "EMBTRT_CACHE": str(tmp / "cache")}
        self.proc = subprocess.Popen([EMBTRT, "up", str(folder), "--port", str(self.port), "--grpc-port", str(self.grpc),
                                      *args], stdout=self.log.open("w"), stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        until(lambda: "ready: http://" in self.text() or self.proc.poll() is not None, 300, "embtrt up ready")
        assert self.proc.poll() is None, self.text()

    def text(self) -> str:
        return self.log.read_text()

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def test_one_command_from_a_model_folder_to_openai_vectors_and_one_ctrl_c_stops_everything(tiny_models, tmp_path):
    from openai import OpenAI
    from sentence_transformers import SentenceTransformer

    folder = tiny_models["bert-cls"]
    ref = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    up = Up(folder, tmp_path)
    try:
        log = up.text()
        assert "building " in log and f"serves bert-cls (embedder); OpenAI base_url http://127.0.0.1:{up.port}/v1" in log, log
        # the routes it answers (token vectors are not: a fused-pooling build), its own GET routes among them
        routes = next(line for line in log.splitlines() if line.startswith("embtrt gateway for bert-cls"))
        assert "POST /v1/embeddings, /embeddings, /embed," in routes and "/embed_all" not in routes, routes
        assert "GET /v1/models," in routes and "/info" in routes and "/health" in routes, routes
        client = OpenAI(base_url=f"http://127.0.0.1:{up.port}/v1", api_key="unused", max_retries=0)
        got = np.array([d.embedding for d in client.embeddings.create(model="bert-cls", input=TEXTS).data])
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, atol=1e-5)
        assert np.abs(got[0] - got[1]).max() > 1e-2   # the model tells the texts apart
        with EmbeddingClient(f"127.0.0.1:{up.grpc}", "bert-cls") as c:
            np.testing.assert_allclose(c.embed(TEXTS), ref, atol=1e-5)
        triton = listening_pids(up.grpc)
        assert triton, "tritonserver listens on the gRPC port"
        regions = _mapped_shm(triton)
        assert regions and regions <= _shm(), "the Python stubs' shared memory"
        assert up.stop(signal.SIGINT) == 0, up.text()[-2000:]
    finally:
        up.kill()
    log = up.text()
    assert "stopping the gateway" in log and "nothing left in flight" in log and "stopped (tritonserver was killed" in log, log
    refuse_taken("127.0.0.1", {"--port": up.port, "--grpc-port": up.grpc})   # both ports free again
    assert not any(Path(f"/proc/{p}").exists() for p in triton), triton
    assert not (regions & _shm()), regions & _shm()

    # started again: the build is reused, the model called by the name a client has hard-coded; SIGTERM stops it
    again = Up(folder, tmp_path, "--drain-grace", "0", "--served-model-name", "text-embedding-3-small")
    try:
        assert "reusing " in again.text() and "building " not in again.text(), again.text()
        assert "serves text-embedding-3-small (embedder)" in again.text(), again.text()
        client = OpenAI(base_url=f"http://127.0.0.1:{again.port}/v1", api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["text-embedding-3-small"]
        got = np.array([d.embedding for d in client.embeddings.create(model="text-embedding-3-small", input=TEXTS).data])
        np.testing.assert_allclose(got, ref, atol=1e-5)
        assert again.stop(signal.SIGTERM) == 0, again.text()[-2000:]
    finally:
        again.kill()


def test_up_refuses_what_it_cannot_serve_before_any_work(tmp_path, minilm_repo, tiny_models):
    """A folder that is no model, --out with a repository, a TensorRT target: refused at once, named."""
    env = {**os.environ, "EMBTRT_CACHE": str(tmp_path / "cache")}

    def run(*args: str) -> str:
        r = subprocess.run([EMBTRT, "up", *args, "--port", str(free_port()), "--grpc-port", str(free_port())],
                           capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode != 0, r.stdout
        return " ".join((r.stdout + r.stderr).split())

    (tmp_path / "empty").mkdir()
    assert "is neither a repository written by embtrt build" in run(str(tmp_path / "empty"))
    assert "is a repository already: --out and --rebuild apply to model folders" in run(
        str(minilm_repo), "--out", str(tmp_path / "x"))
    assert "embtrt up builds python-ort, python-openvino, python-torch, not tensorrt" in run(
        str(tiny_models["bert-cls"]), "--target", "tensorrt")
    assert not (tmp_path / "cache").exists()   # nothing built
