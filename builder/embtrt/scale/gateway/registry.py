"""The models behind one gateway (`MultiGateway`): one `Gateway` per repository, sharing the
upstream clients and the metrics; what each model allows a request (for the schema's `model`
resolution, NAME-query aliases included); readiness of every pool; the /v1/models entries."""

from __future__ import annotations

from ...errors import SpecError
from .config import GatewayConfig
from .embed import Gateway
from .embeddings_schema import EmbeddingsModel, model_suffixes
from .metrics import Metrics
from .upstream import Upstream


class MultiGateway:
    """Several models (repositories) behind one gateway: `model` picks one (or NAME-query ...);
    upstream clients and metrics are shared; unknown names are 404."""

    def __init__(self, cfg: GatewayConfig) -> None:
        self.metrics = Metrics()
        self.upstream = Upstream(cfg.attempts, cfg.timeout_s, self.metrics)
        repos = (cfg.repository, *cfg.more_repositories)
        self.models: dict[str, Gateway] = {}
        for repo in repos:
            g = Gateway(cfg, repo, self.metrics, self.upstream, several=len(repos) > 1)
            if g.served.name in self.models:
                raise SpecError(f"two repositories serve a model named {g.served.name!r} ({repo})",
                                "build one of them with another --name")
            self.models[g.served.name] = g
        named = {e[0] for e in cfg.pools if len(e) == 3}
        if named - set(self.models):
            raise SpecError(f"invalid --pool: no model named {', '.join(sorted(named - set(self.models)))}",
                            f"models: {', '.join(self.models)}")
        self.several = len(self.models) > 1
        # what parsing a request needs of each model (embeddings_schema.parse_embeddings)
        self.schemas: dict[str, EmbeddingsModel] = {
            name: EmbeddingsModel(g.served.options, g.served.vocab_size, g.served.max_len, g.served.max_text_bytes, g.route)
            for name, g in self.models.items()}

    @property
    def first(self) -> Gateway:
        return next(iter(self.models.values()))

    async def close(self) -> None:
        await self.upstream.close()

    async def ready(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, g in self.models.items():
            for pool, state in (await g.ready()).items():
                out[f"{name}/{pool}" if self.several else pool] = state
        return out

    def describe(self) -> list[dict]:
        """/v1/models entries: each model with its identity and request options."""
        out = []
        for g in self.models.values():
            o = g.served.options
            out.append({"id": g.served.name, "object": "model", "created": 0, "owned_by": "embtrt",
                        "embtrt": g.served.identity, "prompts": o.prompts, "default_prompt_name": o.default_prompt_name,
                        "include_prompt": o.include_prompt, "dimensions": o.widths_text(),
                        "embedding_types": ["float", "int8", "uint8", "binary", "ubinary"],
                        "aliases": [f"{g.served.name}-{x}" for x in model_suffixes(o)]})
        return out
