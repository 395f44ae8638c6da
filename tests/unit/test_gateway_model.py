"""One gateway model class serves every kind (scale/gateway/model.py): a kind's class writes what it sends,
what comes back and its operations' methods; the pools, the calls, readiness and the /v1/models entry are the
one class's, and how requests reach the buckets is the kind's routing part (Kind.routing): the front door
(front_door.Door) or length pools (length_pools.LengthPools). Each routing's start-up refusal is tested on a
real repository (no server: the gateway reads the repository's files)."""

from __future__ import annotations

import pytest
from embtrt_backend.kinds import KINDS, kind_of

from embtrt.common.plugins import implementation
from embtrt.errors import SpecError
from embtrt.scale.gateway.config import GatewayConfig, parse_pool
from embtrt.scale.gateway.front_door import Door
from embtrt.scale.gateway.length_pools import LengthPools
from embtrt.scale.gateway.model import GatewayModel

# what only the one class writes: a kind's class that wrote one would be a second gateway model class
SHARED = ("__init__", "ready", "describe", "send", "send_items", "call", "route")


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_every_kinds_gateway_model_is_the_one_class(kind):
    cls = implementation(kind, "gateway_model")
    assert issubclass(cls, GatewayModel) and cls.kind is kind
    own = [m for m in SHARED if any(m in vars(c) for c in cls.__mro__[:cls.__mro__.index(GatewayModel)])]
    assert own == [], f"{cls.__name__} writes {own} itself"


def _two_pools(buckets) -> tuple:
    """The smallest bucket in one pool, the others in another."""
    return tuple(parse_pool(f"{b}=127.0.0.{1 if i == 0 else 2}:1") for i, b in enumerate(buckets))


def test_an_embedder_routes_by_length_pools_and_its_route_is_the_routings(minilm_repo):
    cls = implementation(kind_of("embedder"), "gateway_model")
    g = cls(GatewayConfig(repository=minilm_repo, triton="127.0.0.1:1", route="ids"))
    assert isinstance(g.routing, LengthPools) and g.route == "ids" and g.schema.route == "ids"
    assert len(g.pools) == 1 and g.routing.pool_of == {b: g.pool for b in g.served.buckets}
    # length pools: token ids to each bucket's pool, for good; --route frontdoor is refused naming the pools
    pools = _two_pools(g.served.buckets)
    split = cls(GatewayConfig(repository=minilm_repo, pools=pools, route="auto"))
    assert len(split.pools) == 2 and split.route == "ids" and not split.routing.adaptive
    with pytest.raises(SpecError, match="buckets are in 2 pools"):
        cls(GatewayConfig(repository=minilm_repo, pools=pools, route="frontdoor"))


def test_its_models_entry_lists_the_routes_its_build_serves(minilm_repo):
    """The shared /v1/models entry: the embedder's request options, and its routes, but not the token
    vectors' (/embed_all) of a build whose pooling is inside its graph (it refuses that operation)."""
    g = implementation(kind_of("embedder"), "gateway_model")(GatewayConfig(repository=minilm_repo, triton="127.0.0.1:1"))
    entry = g.describe()
    assert entry["kind"] == "embedder" and entry["id"] == g.served.name and "prompts" in entry
    assert g.refused_operations == {"token_vectors"}
    assert "/v1/embeddings" in entry["routes"] and "/embed_all" not in entry["routes"]


def test_a_front_door_kind_refuses_its_buckets_in_two_pools_naming_what_its_door_does(rerank_repos):
    repo = rerank_repos["bert-ce"]
    cls = implementation(kind_of("reranker"), "gateway_model")
    g = cls(GatewayConfig(repository=repo, triton="127.0.0.1:1"))
    assert isinstance(g.routing, Door) and g.route == "frontdoor" and g.pool is g.pools[0]
    if len(g.served.buckets) < 2:
        pytest.fail(f"the test reranker needs two buckets, it has {g.served.buckets}")
    with pytest.raises(SpecError, match=r"is a reranker: its front door scores every pair, so all its buckets must be in "
                                        r"one pool, not 2"):
        cls(GatewayConfig(repository=repo, pools=_two_pools(g.served.buckets)))
