"""A tritonserver start that Triton itself ends (its Python backend's transient abort, server#8882) is tried once
more; any other failed start is reported at once (embtrt.serve.launch). The abort is injected by a real Python
model: on its first start(s) it writes the abort's own line to the server's log and sends tritonserver SIGABRT,
as the backend does when the exception is thrown; a real tritonserver on 127.0.0.1 throughout."""

from __future__ import annotations

import json

import pytest

from embtrt.errors import ServerError
from embtrt.serve.launch import launch
from embtrt.serve.server import ServerSpec, TritonServer, free_port

LOCK = "terminate called after throwing an instance of 'boost::interprocess::lock_exception'"

MODEL = '''
import json, os, signal, sys, time


class TritonPythonModel:
    def initialize(self, args):
        p = {k: v["string_value"] for k, v in json.loads(args["model_config"])["parameters"].items()}
        with open(p["starts"], "a") as f:
            f.write("x")
        if os.path.getsize(p["starts"]) <= int(p["aborts"]):
            print(p["line"], file=sys.stderr, flush=True)
            os.kill(os.getppid(), signal.SIGABRT)   # the stub's parent: tritonserver
            time.sleep(60)

    def execute(self, requests):
        return []
'''


def _repository(tmp_path, line: str, aborts: int):
    repo, starts = tmp_path / "repo", tmp_path / "starts"
    m = repo / "aborts_at_start"
    (m / "1").mkdir(parents=True)
    (m / "1" / "model.py").write_text(MODEL)
    params = {"starts": str(starts), "aborts": str(aborts), "line": line}
    (m / "config.pbtxt").write_text(
        'name: "aborts_at_start"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "X", data_type: TYPE_FP32, dims: [1] }]\noutput [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]\n'
        'instance_group [{ kind: KIND_CPU, count: 1 }]\n'
        + "".join(f'parameters {{ key: "{k}", value: {{ string_value: {json.dumps(v)} }} }}\n' for k, v in params.items()))
    return repo, starts


def _server(repo, tmp_path) -> TritonServer:
    return TritonServer(ServerSpec(repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                                   startup_timeout_s=90, log_file=tmp_path / "tritonserver.log"))


def test_a_start_ended_by_the_python_backends_lock_abort_is_tried_once_more_and_serves(tmp_path):
    repo, starts = _repository(tmp_path, LOCK, aborts=1)
    said: list[str] = []
    srv = _server(repo, tmp_path)
    try:
        launch(srv, log=said.append)
        assert srv._get("/v2/models/aborts_at_start/ready") == 200
    finally:
        srv.stop()
    assert starts.read_text() == "xx"                        # the model started twice: aborted, then ready
    assert len(said) == 1 and "boost::interprocess::lock_exception" in said[0] and "2 of 2" in said[0], said
    log = (tmp_path / "tritonserver.log").read_text(errors="replace")
    assert log.count(LOCK) == 1                               # the first start's abort, kept in the one log


def test_the_same_abort_twice_is_reported_not_tried_a_third_time(tmp_path):
    repo, starts = _repository(tmp_path, LOCK, aborts=2)
    said: list[str] = []
    srv = _server(repo, tmp_path)
    try:
        with pytest.raises(ServerError, match="exited with code") as exc:
            launch(srv, log=said.append)
    finally:
        srv.stop()
    assert starts.read_text() == "xx" and len(said) == 1
    assert "lock_exception" in exc.value.message   # the log's end, in the error


def test_any_other_abort_is_reported_at_once(tmp_path):
    repo, starts = _repository(tmp_path, "terminate called after throwing an instance of 'std::runtime_error'",
                               aborts=1)
    said: list[str] = []
    srv = _server(repo, tmp_path)
    try:
        with pytest.raises(ServerError, match="exited with code"):
            launch(srv, log=said.append)
    finally:
        srv.stop()
    assert starts.read_text() == "x" and said == []          # one start: nothing of the repository is retried
