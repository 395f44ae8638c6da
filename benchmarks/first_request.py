"""The first requests to a freshly started embedder's front door (its TEXT input): one tritonserver on loopback ports, then
single-text requests over gRPC, each timed, with Triton's compute figure for the front door.

    python benchmarks/first_request.py REPO [--model NAME] [--requests 6]

Shows what a warm-up at load buys (benchmarks/README.md, lever 15): without one, the first request
to each front-door instance paid the Python stub's first-request cost.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from embtrt.repository.manifest import read_manifest
from embtrt.serve.server import ServerSpec, TritonServer, free_port


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--model", help="the front door (default: the manifest's model)")
    ap.add_argument("--requests", type=int, default=6)
    a = ap.parse_args()
    name = a.model or read_manifest(a.repo).name
    spec = ServerSpec(a.repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                      log_file=Path("/tmp/first_request_tritonserver.log"))
    with TritonServer(spec) as srv, grpcclient.InferenceServerClient(srv.grpc_url) as c:
        c.get_model_metadata(name)   # the channel is up before the first timed request
        for i in range(a.requests):
            x = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
            x.set_data_from_numpy(np.array([[f"hello world number {i}".encode()]], dtype=object))
            t = time.perf_counter()
            c.infer(name, [x])
            ms = 1000 * (time.perf_counter() - t)
            st = c.get_inference_statistics(name, as_json=True)["model_stats"][0]["inference_stats"]
            print(f"request {i}: {ms:.1f} ms (the front door's compute so far, warm-ups included: "
                  f"{int(st['compute_infer']['ns']) / 1e6:.1f} ms)")


if __name__ == "__main__":
    main()
