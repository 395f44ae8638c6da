"""What `embtrt k8s` renders from: K8sSpec, the images' defaults and the Python each image serves."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ... import __version__
from ...errors import SpecError
from ...repository.bundle_record import parse_python
from ...serve.otel import sample_from_env

GRPC, HTTP, METRICS, GATEWAY_PORT = 8001, 8000, 8002, 8080
QUEUE_METRIC = "embtrt_triton_queue_avg_us"  # exposed by the prometheus-adapter rule
PART_OF = "app.kubernetes.io/part-of"

# What `make images` builds (deploy/pool.Containerfile on NGC's tritonserver 25.06, deploy/gateway.Containerfile);
# push them to the cluster's registry under these names, or pass --image / --gateway-image.
TRITON_RELEASE = "25.06"
POOL_IMAGE = f"embtrt-pool:{__version__}-tritonserver-{TRITON_RELEASE}"
GATEWAY_IMAGE = f"embtrt-gateway:{__version__}"

# The Python of NGC's tritonserver images, by release year (NVIDIA's framework support matrix:
# 23.xx and 24.xx are Ubuntu 22.04 with Python 3.10, 25.xx are Ubuntu 24.04 with Python 3.12).
NGC_PYTHON = {23: "3.10", 24: "3.10", 25: "3.12"}
_RELEASE = re.compile(r"tritonserver[:\-_](\d{2})\.(\d{2})")
_REF = re.compile(r"^[a-z0-9][a-z0-9._\-/:]*(@sha256:[0-9a-f]{64})?$")


def image_python(image: str) -> str | None:
    """The Python of a tritonserver image named by NGC's release tag (`tritonserver:25.06-py3`, or an
    image made from it and tagged `...-tritonserver-25.06`); None when the name does not say."""
    m = _RELEASE.search(image.split("@", 1)[0])
    return NGC_PYTHON.get(int(m.group(1))) if m else None


@dataclass(frozen=True)
class K8sSpec:
    repository: Path
    out: Path
    pools: tuple[int, ...] = ()        # upper bucket of each pool; default: one pool per bucket
    image: str = POOL_IMAGE
    gateway_image: str = GATEWAY_IMAGE
    engines_image: str | None = None   # an image with tritonserver's TensorRT + `pip install 'embtrt[tensorrt]'`
    gpus: int = 1
    replicas: int = 1
    max_replicas: int = 8
    target_queue_ms: float = 50.0
    repo_pvc: str | None = None
    namespace: str | None = None
    # Further repositories (one model each) on pools of their own behind the same gateway; each is
    # read from its own PersistentVolumeClaim, <model>-repository.
    more_repositories: tuple[Path, ...] = ()
    # The Python of the pool image's tritonserver; default: read from an NGC release tag in --image.
    server_python: str | None = None
    # A kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt): HTTPS at the gateway and TLS on its gRPC
    # to the pools. Its certificate must name the gateway's and every pool's Service.
    tls_secret: str | None = None
    gateway_replicas: int = 2
    # Seconds a terminating pool pod keeps serving before its Python models refuse new requests
    # (UNAVAILABLE) while endpoints and the gateway's connections move to other replicas.
    drain_grace_s: int = 10
    # each pool pod's CPU and memory (requests equal to limits: Guaranteed QoS)
    pool_cpu: str = "4"
    pool_memory: str = "16Gi"
    # the p99 (ms) the latency alert holds the gateway to; default: the SLO `embtrt tune` tuned for, else 1000
    alert_p99_ms: float | None = None
    # also a PrometheusRule and PodMonitors (the Prometheus Operator's CRDs), beside the plain ConfigMaps
    prometheus_operator: bool = False
    # OpenTelemetry traces to this OTLP/HTTP endpoint (the gateway's spans, Triton's OpenTelemetry mode in
    # the pools), at this fraction of requests; None: no tracing (the rendering machine's OTEL_* are not read)
    otlp_endpoint: str | None = None
    trace_sample: float = 1.0

    def __post_init__(self) -> None:
        sample_from_env(self.trace_sample)   # its range checked (given: no variable read)
        if self.otlp_endpoint is not None and not re.match(r"https?://[^/\s]+", self.otlp_endpoint):
            raise SpecError(f"invalid --otlp-endpoint {self.otlp_endpoint!r}",
                            "an OTLP/HTTP URL the pods can reach, e.g. http://otel-collector.monitoring:4318/v1/traces")
        if not re.fullmatch(r"\d+(\.\d+)?m?", self.pool_cpu) or float(self.pool_cpu.rstrip("m") or 0) <= 0:
            raise SpecError(f"invalid pool_cpu: {self.pool_cpu!r}", "a Kubernetes CPU quantity such as 2, 1.5 or 500m")
        if not re.fullmatch(r"\d+(\.\d+)?(Ki|Mi|Gi|Ti|K|M|G|T)?", self.pool_memory) or \
                float(re.sub(r"[A-Za-z]+$", "", self.pool_memory)) <= 0:
            raise SpecError(f"invalid pool_memory: {self.pool_memory!r}", "a Kubernetes memory quantity such as 8Gi or 512Mi")
        for field_, ref in (("image", self.image), ("gateway_image", self.gateway_image),
                            ("engines_image", self.engines_image)):
            if ref is not None and not _REF.match(ref):
                raise SpecError(f"invalid {field_}: {ref!r}",
                                "an image reference such as registry/name:tag or registry/name@sha256:<64 hex>")
        if self.server_python is not None:
            parse_python(self.server_python)
        for field_, n, low in (("gpus", self.gpus, 0), ("replicas", self.replicas, 1),
                               ("max_replicas", self.max_replicas, 1), ("gateway_replicas", self.gateway_replicas, 1),
                               ("drain_grace_s", self.drain_grace_s, 0)):
            if n < low:
                raise SpecError(f"invalid {field_}: {n}", f"at least {low}")
        if self.alert_p99_ms is not None and not self.alert_p99_ms > 0:
            raise SpecError(f"invalid alert_p99_ms: {self.alert_p99_ms}", "a p99 in milliseconds above 0, e.g. 200")
        if self.tls_secret is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", self.tls_secret):
            raise SpecError(f"invalid tls_secret: {self.tls_secret!r}", "a Secret name (lower case, digits, '-')")

    def pool_python(self) -> str:
        """The Python the pools' tritonserver runs: --server-python, else the image's NGC release."""
        py = image_python(self.image)
        if self.server_python is not None:
            given = parse_python(self.server_python)
            if py is not None and py != given:
                raise SpecError(f"invalid server_python {given}: the pool image {self.image} is NGC's release of "
                                f"Python {py}", f"pass --server-python {py}, or an image whose name does not claim an NGC release")
            return given
        if py is None:
            raise SpecError(f"cannot tell which Python the pool image {self.image} runs",
                            "pass --server-python (e.g. 3.12), or an image tagged with its NGC release "
                            f"(tritonserver:YY.MM; known: {', '.join(f'{y}.xx -> {p}' for y, p in NGC_PYTHON.items())})")
        return py
