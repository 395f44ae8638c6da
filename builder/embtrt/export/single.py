"""What the reranker and sparse builds share: a repository of one front door that runs its own
encoder — written with its bundle, then the manifest, then checked before the build returns."""

from __future__ import annotations

from pathlib import Path

from ..common.log import Log
from ..errors import RepositoryError
from ..repository.check import check_repository
from ..repository.manifest import Manifest, write_manifest
from .render import ModelPlan, attach_deps, bundle_dir, write_repository
from .result import BuildResult
from .spec import BuildSpec


def write_front_door(spec: BuildSpec, plan: ModelPlan, repo: Path, log: Log) -> dict | None:
    """The front door's folder (config, files, Python code, deps) and the bundle -> the bundle record."""
    attach_deps(spec, [plan])
    write_repository([plan], repo)
    if not spec.bundle_deps:
        return None
    from .bundle import make_bundle

    bundle = make_bundle(spec.target, spec.server_python, repo / bundle_dir(spec), log)
    bundle["path"] = bundle_dir(spec)
    return bundle


def finish(repo: Path, manifest: Manifest, step: str, log: Log) -> BuildResult:
    """Write the manifest, check the repository (a failure is embtrt's bug), return the result."""
    write_manifest(repo, manifest)
    log(f"{step} checking the repository")
    rep = check_repository(repo)
    for line in rep.lines():
        log(line)
    if not rep.passed:
        raise RepositoryError("the generated repository failed its check: " + "; ".join(rep.failures()),
                              "this is a bug in embtrt; please report it with the lines above")
    return BuildResult(repo, manifest.to_dict(), rep.lines(), [], [])
