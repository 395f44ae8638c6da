"""Every kind builds on the one build skeleton (export/single.py's FrontDoorBuild: its steps, the embedder's
its own) and its gRPC client is a KindClient (serve/client.py): one config read, one refusal of a model of a
kind it does not take, naming the client that model takes. The embedder's EmbeddingClient is the one client of
a capability (a text in, a pooled vector out): it takes every kind that has it, and no other. (Against served
models of other kinds: tests/integration/test_client_kinds.py.)"""

from __future__ import annotations

import pytest
from embtrt_backend.kinds import KINDS, POOLED

from embtrt.common.plugins import implementation
from embtrt.export.single import FrontDoorBuild
from embtrt.serve.client import EmbeddingClient, KindClient


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_every_kinds_client_is_a_kind_client_that_takes_its_own_kind(kind):
    cls = implementation(kind, "client")
    assert issubclass(cls, KindClient)
    c = cls.__new__(cls)   # what it takes is the class's rule; no server is asked
    assert c.accepts(kind)
    others = [k.name for k in KINDS if k is not kind and c.accepts(k)]
    if cls is EmbeddingClient:
        assert others == [k.name for k in KINDS if k is not kind and k.has(POOLED) and not k.pairs] and others
    else:
        assert others == []


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_every_kinds_build_is_the_one_skeleton(kind):
    build = implementation(kind, "build")
    owner = getattr(build, "__self__", None)   # Kind.build names a FrontDoorBuild subclass's build_in
    assert isinstance(owner, type) and issubclass(owner, FrontDoorBuild) and owner.kind is kind
    assert "build" not in vars(owner), f"{owner.__name__} writes its own build(): the skeleton's steps are its parts"
