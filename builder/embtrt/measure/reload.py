"""A running tritonserver's model configs, read and loaded through the repository API (Triton's
JSON form): what `embtrt tune` and `embtrt matrix` change between trials and budgets.
The server must run with `--model-control-mode=explicit`; otherwise loading is refused, and
that refusal is turned into the caller's error with its hint."""

from __future__ import annotations

import json

from ..errors import EmbtrtError
from ..repository.budget import load_order
from ..repository.manifest import Manifest


def _client(url: str):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url)


def ready_models(url: str) -> set[str]:
    """The models the server has loaded and ready."""
    with _client(url) as c:
        return {x["name"] for x in c.get_model_repository_index(as_json=True).get("models", [])
                if x.get("state") == "READY"}


def model_configs(url: str, names) -> dict[str, dict]:
    """Each named model's config as the server has it now."""
    with _client(url) as c:
        return {m: c.get_model_config(m, as_json=True)["config"] for m in names}


def load_configs(url: str, manifest: Manifest, configs: dict[str, dict], error: type[EmbtrtError], hint: str) -> None:
    """Load each model with its config override, ensembles after the models they compose and the
    front door last. A server not in explicit model-control mode raises `error` with `hint`."""
    with _client(url) as c:
        for m in load_order(manifest, configs):
            try:
                c.load_model(m, config=json.dumps(configs[m]))
            except Exception as exc:  # tritonclient's InferenceServerException
                if "explicit" in str(exc) or "not allowed" in str(exc) or "polling" in str(exc):
                    raise error(f"the server at {url} is not in explicit model-control mode: {exc}", hint) from None
                get_status = getattr(exc, "status", None)   # InferenceServerException.status()
                status = get_status() if callable(get_status) else None
                if status is not None and "UNAVAILABLE" in str(status):
                    # the server went away mid-reload (a tritonserver that aborted, or was stopped)
                    raise error(f"the server at {url} stopped answering while loading {m}: {str(exc).strip()[:300]}",
                                "tritonserver may have exited during the reload: its log says why") from None
                raise
