"""`embtrt k8s`: plain Kubernetes YAML for length pools of tritonservers behind `embtrt gateway`.

Per length pool (a range of buckets): a Deployment of tritonserver serving only that pool's
models (`--model-control-mode=explicit --load-model=...`, Triton's model-repository, logging,
shared-memory and trace APIs behind an admin header), its Service, an autoscaling/v2 HPA on
Triton's average queue time (through prometheus-adapter, whose rule is rendered as a ConfigMap)
and a PodDisruptionBudget. The gateway: Deployment (API key from a generated Secret), Service,
CPU HPA, PDB. NetworkPolicies: only the gateway reaches the pools' gRPC port (Prometheus their
metrics port), pools reach nothing, the gateway only the pools and DNS. With a TLS Secret: HTTPS
at the gateway and TLS on its gRPC to the pools. No CRDs, no Helm; a kustomization.yaml ties the
files together. What a team watches it with (scale/k8s/observe.py): a Grafana dashboard and Prometheus
alert rules as ConfigMaps, and with --prometheus-operator a PrometheusRule and PodMonitors.

A reranker's or sparse encoder's repository (its front door plans every bucket and runs the
model, or calls its bucket encoders) is one pool that loads the front door and those encoders,
behind the same gateway routes as its kind's.

Before rendering, every repository is checked (`embtrt check`) for the Python the pool image runs:
a bundle built for another Python is refused with the command that rebuilds it.

The repository comes from a PersistentVolumeClaim (read-only); each pool pod copies it into a
pod-local volume, and for TensorRT targets an init container runs `embtrt engines` there, so
the plans are built on the GPU that serves them. Every pod passes Pod Security "restricted":
user 1000, read-only root filesystems, no capabilities, RuntimeDefault seccomp, no
service-account token; requests equal limits, scratch volumes sized.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...errors import SpecError
from ...repository.check import check_repository
from ...repository.manifest import Manifest, read_manifest
from .gateway import adapter_rules, gateway, network_policies, secret
from .output import previous_secrets, write_clean
from . import observe
from .pools import plan_pools, wants_gpu
from .pools import model_pools as _model_pools
from .spec import GATEWAY_IMAGE, GATEWAY_PORT, GRPC, HTTP, METRICS, NGC_PYTHON, PART_OF, POOL_IMAGE, QUEUE_METRIC
from .spec import K8sSpec, image_python

__all__ = ["GATEWAY_IMAGE", "GATEWAY_PORT", "GRPC", "HTTP", "METRICS", "NGC_PYTHON", "POOL_IMAGE", "QUEUE_METRIC",
           "K8sSpec", "check_python", "image_python", "plan_pools", "render", "write"]


def _name(s: str) -> str:
    return s.replace("_", "-").lower()


def rebuild_hint(m: Manifest, python: str) -> str:
    cmd = str(m.extra.get("rebuild") or "")
    if cmd:
        cmd = re.sub(r"--server-python\s+\S+", f"--server-python {python}", cmd)
        if "--server-python" not in cmd:
            cmd += f" --server-python {python}"
    else:
        cmd = f"embtrt build MODEL --out REPO --name {m.name} --server-python {python}"
    # into a folder of its own: the recorded --out exists (a build refuses it) and may be in use (--force
    # would replace the repository being served)
    new = f"-py{python}"
    cmd = re.sub(r"--out\s+(\S+)", lambda o: f"--out {o.group(1).rstrip('/')}{new}", cmd)
    cmd = re.sub(r"\s--force\b", "", cmd)
    return f"rebuild it for the pool image's Python into a new folder, then render that one: {cmd}"


def check_python(repo: Path, m: Manifest, python: str) -> None:
    """Refuse a repository that would not load on the pool image: `embtrt check --server-python`."""
    rep = check_repository(repo, allow_pending_plans=True, server_python=python)
    bad = [line for line in rep.lines() if line.startswith("[x] ")]
    if bad:
        raise SpecError(f"{repo}: not deployable on a tritonserver with Python {python}:\n  " + "\n  ".join(bad),
                        rebuild_hint(m, python) if any("bundle" in b for b in bad) else "fix the repository (embtrt check)")


def render(spec: K8sSpec, keep: dict[str, dict[str, str]] | None = None) -> dict[str, list[dict]]:
    """{file name: [documents]}. `keep`: the previous render's Secret values, by name, to reuse."""
    repos = [Path(spec.repository), *map(Path, spec.more_repositories)]
    manifests = [read_manifest(r) for r in repos]
    several = len(manifests) > 1
    names = [m.name for m in manifests]
    if len(set(names)) != len(names) or len({_name(n) for n in names}) != len(names):
        raise SpecError(f"invalid repositories: model names repeat ({', '.join(names)})",
                        "build each with its own --name")
    if several and spec.repo_pvc:
        raise SpecError("invalid --repo-pvc with several repositories", "each model's claim is <model>-repository")
    python = spec.pool_python()
    trt = [m.name for m in manifests if m.target == "tensorrt"]
    if trt and spec.engines_image is None:
        raise SpecError(f"{', '.join(trt)}: TensorRT plans are built in the pod by `embtrt engines`, which the pool "
                        "image does not have", "pass --engines-image: tritonserver's image with "
                        "`pip install 'embtrt[tensorrt]'` (the same TensorRT as the pool's)")
    for r, m in zip(repos, manifests):
        check_python(r, m, python)
    keep = keep or {}
    app = _name(names[0])
    common = {PART_OF: app, "app.kubernetes.io/managed-by": "embtrt"}
    api_secret, admin_secret = f"{app}-gateway-api-key", f"{app}-triton-admin"
    files: dict[str, list[dict]] = {}
    pool_args: list[str] = []
    gw_volumes: list[dict] = []
    gw_mounts: list[dict] = []
    gw_repos: list[str] = []
    for r, m in zip(repos, manifests):
        mapp = _name(m.name)
        pvc = spec.repo_pvc or f"{mapp}-repository"
        volume = "repository" if not several else f"repository-{mapp}"
        mount = "/repository" if not several else f"/repositories/{mapp}"
        gw_volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": pvc, "readOnly": True}})
        gw_mounts.append({"name": volume, "mountPath": mount, "readOnly": True})
        gw_repos.append(mount)
        pool_args += _model_pools(spec, r, m, mapp, pvc, common, files, several, admin_secret)
    gateway(spec, app, common, files, pool_args, gw_volumes, gw_mounts, gw_repos, api_secret)
    files["networkpolicy.yaml"] = network_policies(app, common)
    files.update(observe.render(app, common, manifests, any(wants_gpu(m) for m in manifests), spec.alert_p99_ms,
                                spec.prometheus_operator, spec.tls_secret))
    files["prometheus-adapter-rules.yaml"] = [adapter_rules(app, common)]
    files["secrets.yaml"] = [secret(api_secret, common, "api-key", keep.get(api_secret, {}).get("api-key")),
                             secret(admin_secret, common, "key", keep.get(admin_secret, {}).get("key"))]
    kust: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                            "resources": sorted(files)}
    if spec.namespace:
        kust["namespace"] = spec.namespace
    files["kustomization.yaml"] = [kust]
    return files


def write(spec: K8sSpec, log=print) -> list[Path]:
    """Render into a clean --out: a previous render's files are replaced (its generated keys kept),
    anything else there is refused, never deleted."""
    out = Path(spec.out)
    files = render(spec, keep=previous_secrets(out))
    written = write_clean(out, files, secret_files={"secrets.yaml"})
    log(f"wrote {len(written)} files to {out}: " + ", ".join(sorted(files)))
    key_secret = files["secrets.yaml"][0]["metadata"]["name"]
    log(f"the gateway's API key is in {out / 'secrets.yaml'} (Secret {key_secret}, key api-key; mode 0600): "
        "keep it out of version control")
    return written
