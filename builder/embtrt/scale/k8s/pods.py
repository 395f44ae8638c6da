"""What every rendered pod shares: the Pod Security "restricted" contexts, resources, scratch volumes."""

from __future__ import annotations

import math
from pathlib import Path

USER = 1000
SECCOMP = {"type": "RuntimeDefault"}


def container_security() -> dict:
    """Non-root user 1000, read-only root filesystem, no capabilities, no privilege escalation, the
    runtime's default seccomp profile: every rule of Pod Security "restricted", per container."""
    return {"runAsNonRoot": True, "runAsUser": USER, "runAsGroup": USER, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True, "privileged": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": dict(SECCOMP)}


def pod_spec(containers: list[dict], volumes: list[dict], init: list[dict] | None = None) -> dict:
    """A pod that runs as user 1000 under RuntimeDefault seccomp, without the service-account token
    (nothing here talks to the Kubernetes API), and shares no host namespace."""
    spec: dict = {"automountServiceAccountToken": False, "enableServiceLinks": False,
                  "securityContext": {"runAsNonRoot": True, "runAsUser": USER, "runAsGroup": USER, "fsGroup": USER,
                                      "seccompProfile": dict(SECCOMP)}}
    if init:
        spec["initContainers"] = init
    spec["containers"] = containers
    spec["volumes"] = volumes
    return spec


def resources(cpu: str, mem: str, gpus: int = 0, scratch: str | None = None) -> dict:
    """Requests equal to limits (Guaranteed QoS), the GPU and ephemeral storage included."""
    req = {"cpu": cpu, "memory": mem}
    if gpus:
        req["nvidia.com/gpu"] = str(gpus)
    if scratch:
        req["ephemeral-storage"] = scratch
    return {"requests": dict(req), "limits": dict(req)}


def image_fields(image: str) -> dict:
    """The image as given (a digest pins it: registry/name@sha256:...), pulled when not present: the
    default images carry embtrt's version in their tag, so a new release is a new tag."""
    return {"image": image, "imagePullPolicy": "IfNotPresent"}


def scratch(name: str, size: str, memory: bool = False) -> dict:
    """A pod-local emptyDir with a size limit (kubelet evicts a pod that writes past it)."""
    ed: dict = {"sizeLimit": size}
    if memory:
        ed["medium"] = "Memory"
    return {"name": name, "emptyDir": ed}


def repository_size(repo: Path) -> str:
    """Room for a copy of the repository in a pod: twice its size on disk (the plans TensorRT writes
    beside the ONNX, Python caches), in whole Gi, at least 1Gi."""
    total = sum(p.stat().st_size for p in Path(repo).rglob("*") if p.is_file() and not p.is_symlink())
    total += sum(p.resolve().stat().st_size for p in Path(repo).rglob("*") if p.is_symlink() and p.resolve().is_file())
    return f"{max(1, math.ceil(2 * total / 2**30))}Gi"


def add_gi(*sizes: str) -> str:
    return f"{sum(int(s.removesuffix('Gi')) for s in sizes)}Gi"
