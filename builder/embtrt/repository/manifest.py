"""embtrt.json, the repository's contract: one typed, versioned manifest, one reader, one writer.

Every stage (serve, gateway, k8s, tune, bench, the GPU host's `embtrt engines`, check) reads a
repository through `read_manifest`, never as a bare dict, so a renamed field fails here with a
message instead of breaking a reader silently, and a repository written by another embtrt is
told apart by its `schema_version`:

- schema 1 (embtrt 0.1 before the version field; marked `"embtrt_manifest": 1`): same fields,
  read as they are (the request-option fields get their defaults: no prompts, every width).
- schema 2: adds `schema_version` and the request options (prompts, widths, vector ranges).
- schema 3: adds `kind` (the kind of model: "embedder", "reranker", "sparse"; schemas 1 and 2 are
  embedders) and, for rerankers, `num_labels` and `activation` (docs/rerankers.md; a sparse
  encoder's activation is relu or log1p_relu, docs/sparse.md).
- a newer schema than this embtrt knows is refused: upgrade embtrt to read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embtrt_backend.kinds import NAMES, Kind, kind_of
from embtrt_backend.kinds import KINDS as REGISTRY

from ..errors import RepositoryError
from .gate import Gate

MANIFEST = "embtrt.json"
SCHEMA_VERSION = 3
KINDS = NAMES   # embtrt_backend.kinds: the registry of kinds
OLDEST_READABLE = 1


@dataclass(frozen=True)
class ModelNames:
    front_door: str
    ensembles: tuple[str, ...]
    encoders: tuple[str, ...]


@dataclass(frozen=True)
class Manifest:
    """The fields every reader relies on, typed; the rest (versions, parity figures, the build
    spec, TensorRT state, tuning record ...) is kept in `extra` and written back unchanged."""

    name: str
    identity: dict[str, str]
    models: ModelNames
    pooling: str
    normalize: bool
    dim: int
    buckets: tuple[int, ...]
    max_seq_length: int
    overflow: str
    overflow_stride: int
    precision: str
    target: str
    backend_profile: str
    pooler: str
    input_names: tuple[str, ...]
    encoder_output: str
    pad_id: int
    max_batch_size: int
    max_batch_tokens: int | None
    bucket_max_batch: dict[int, int]
    server_python: str
    bundle: dict | None = None
    router_encoder: str = "auto"
    # request options (schema 2)
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    include_prompt: bool = True
    dimensions: tuple[int, ...] | None = None   # allowed Matryoshka widths; None: any 1 .. dim
    quant_ranges: list[list[float]] | None = None  # int8/uint8 per-dimension [min row, max row]
    # the kind of model (schema 3): what the front door takes and returns, which routes serve it
    kind: str = kind_of(None).name   # the registry's default kind
    num_labels: int | None = None      # rerankers: the classifier's labels (SCORES width)
    activation: str | None = None      # rerankers: what CrossEncoder applies by default (sigmoid, identity)
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> dict[str, Any]:
        """The build spec as recorded (options of the build that wrote this repository)."""
        return dict(self.extra.get("spec") or {})

    @property
    def gate(self) -> Gate:
        g = self.spec.get("gate")
        return Gate(**g) if isinstance(g, dict) else Gate()

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema_version": self.schema_version,
            "identity": dict(self.identity),
            "name": self.name,
            "models": {"front_door": self.models.front_door, "ensembles": list(self.models.ensembles),
                       "encoders": list(self.models.encoders)},
            "pooling": self.pooling, "normalize": self.normalize, "dim": self.dim,
            "buckets": list(self.buckets), "max_seq_length": self.max_seq_length,
            "overflow": self.overflow, "overflow_stride": self.overflow_stride,
            "precision": self.precision, "target": self.target, "backend_profile": self.backend_profile,
            "pooler": self.pooler, "input_names": list(self.input_names), "encoder_output": self.encoder_output,
            "pad_id": self.pad_id, "max_batch_size": self.max_batch_size, "max_batch_tokens": self.max_batch_tokens,
            "bucket_max_batch": {str(b): n for b, n in self.bucket_max_batch.items()},
            "router_encoder": self.router_encoder,
            "bundle": self.bundle, "server_python": self.server_python,
            "prompts": dict(self.prompts), "default_prompt_name": self.default_prompt_name,
            "include_prompt": self.include_prompt,
            "dimensions": list(self.dimensions) if self.dimensions is not None else None,
            "quant_ranges": self.quant_ranges,
            "kind": self.kind, "num_labels": self.num_labels, "activation": self.activation,
        }
        for k, v in self.extra.items():
            doc.setdefault(k, v)
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = MANIFEST) -> "Manifest":
        version = doc.get("schema_version")
        if version is None and doc.get("embtrt_manifest") == 1:
            version = 1
        if not isinstance(version, int):
            raise RepositoryError(f"{where}: no schema_version: not a manifest written by embtrt build",
                                  "point at a repository written by `embtrt build`")
        if version > SCHEMA_VERSION:
            raise RepositoryError(f"{where}: manifest schema {version} is newer than this embtrt reads "
                                  f"(schema {OLDEST_READABLE} .. {SCHEMA_VERSION})",
                                  "upgrade embtrt (pip install -U embtrt) to serve or check this repository")
        if version < OLDEST_READABLE:
            raise RepositoryError(f"{where}: manifest schema {version} is too old for this embtrt",
                                  "rebuild the repository with `embtrt build` (its `rebuild` field has the command)")
        try:
            spec = doc.get("spec") or {}
            buckets = tuple(int(b) for b in doc["buckets"])
            models = doc["models"]
            known = {f for f in cls.__dataclass_fields__} | {"models", "embtrt_manifest"}
            return cls(
                name=str(doc["name"]), identity={str(k): str(v) for k, v in doc["identity"].items()},
                models=ModelNames(models["front_door"], tuple(models["ensembles"]), tuple(models["encoders"])),
                pooling=str(doc["pooling"]), normalize=bool(doc["normalize"]), dim=int(doc["dim"]),
                buckets=buckets, max_seq_length=int(doc["max_seq_length"]), overflow=str(doc["overflow"]),
                overflow_stride=int(doc.get("overflow_stride", spec.get("overflow_stride", 0))),
                precision=str(doc["precision"]), target=str(doc["target"]),
                backend_profile=str(doc["backend_profile"]), pooler=str(doc["pooler"]),
                input_names=tuple(doc["input_names"]), encoder_output=str(doc["encoder_output"]),
                pad_id=int(doc["pad_id"]),
                max_batch_size=int(doc.get("max_batch_size", spec.get("max_batch_size", 32))),
                max_batch_tokens=(int(doc["max_batch_tokens"]) if doc.get("max_batch_tokens") is not None else None),
                bucket_max_batch={int(b): int(n) for b, n in (doc.get("bucket_max_batch") or {}).items()},
                router_encoder=str(doc.get("router_encoder", spec.get("router_encoder", "auto"))),
                server_python=str(doc.get("server_python", spec.get("server_python", ""))),
                bundle=doc.get("bundle"),
                prompts={str(k): str(v) for k, v in (doc.get("prompts") or {}).items()},
                default_prompt_name=doc.get("default_prompt_name"),
                include_prompt=bool(doc.get("include_prompt", True)),
                dimensions=(tuple(int(d) for d in doc["dimensions"]) if doc.get("dimensions") else None),
                quant_ranges=doc.get("quant_ranges"),
                kind=_kind(doc.get("kind", kind_of(None).name), where),
                num_labels=(int(doc["num_labels"]) if doc.get("num_labels") is not None else None),
                activation=doc.get("activation"),
                schema_version=SCHEMA_VERSION,  # read as (and written back as) the current schema
                extra={k: v for k, v in doc.items() if k not in known},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RepositoryError(f"{where}: schema {version} manifest is malformed ({type(exc).__name__}: {exc})",
                                  "rebuild the repository with `embtrt build`") from None

    @property
    def model_kind(self) -> Kind:
        """The registry's Kind of this repository's model."""
        return kind_of(self.kind)

    def require_length_pools(self, command: str) -> "Manifest":
        """This manifest, or a clear error where `command` (which measures bucket models) does not take its kind."""
        if not self.model_kind.length_pools:
            pooled = " or ".join(k.label for k in REGISTRY if k.length_pools)
            raise RepositoryError(f"{self.name} is {self.model_kind.label}: `{command}` measures bucket models, which only "
                                  f"repositories of {pooled} have (its front door plans every bucket itself)",
                                  "docs/kinds.md lists each kind's commands (serve, check, verify, bench, tune, the gateway)")
        return self

    def bucket_batch(self, bucket: int) -> int:
        """The bucket's max rows per run (the token budget), as the configs say."""
        return self.bucket_max_batch.get(bucket, self.max_batch_size)

    def with_extra(self, **items: Any) -> "Manifest":
        from dataclasses import replace

        return replace(self, extra={**self.extra, **items})


def _kind(kind: object, where: str) -> str:
    if kind not in KINDS:
        raise RepositoryError(f"{where}: unknown kind of model {kind!r} (this embtrt serves {', '.join(KINDS)})",
                              "upgrade embtrt to serve this repository")
    return str(kind)


def manifest_path(repo: Path) -> Path:
    return Path(repo) / MANIFEST


def has_manifest(repo: Path) -> bool:
    return manifest_path(repo).is_file()


def read_manifest(repo: Path) -> Manifest:
    """The manifest of a repository; a clear error when it is missing, malformed or too new."""
    path = manifest_path(repo)
    if not path.is_file():
        raise RepositoryError(f"invalid repository: {repo} has no {MANIFEST}",
                              "point at a folder written by `embtrt build`")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RepositoryError(f"{path}: cannot read the manifest ({exc})", "rebuild the repository") from None
    if not isinstance(doc, dict):
        raise RepositoryError(f"{path}: the manifest is not a JSON object", "rebuild the repository")
    return Manifest.from_dict(doc, str(path))


def write_manifest(repo: Path, manifest: Manifest) -> Path:
    path = manifest_path(repo)
    path.write_text(json.dumps(manifest.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
    return path
