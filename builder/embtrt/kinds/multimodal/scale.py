"""One text-and-image embedder behind the gateway (`Multimodal`): a request's texts and images to the model's
front door, texts in calls of TEXT and images in calls of IMAGE (one modality per call: Triton's batch rule),
each in parts of at most its max batch, concurrently; the vectors back in input order. The front door applies
the request's options (prompt and truncation to texts; width and vector type to both) and reports each text's
tokens (an image takes none) as the usage.

It serves the embed operation (scale/gateway/ops/embed.py and the dialects: OpenAI's and NIM's /v1/embeddings with `modality`,
infinity's /embeddings with `modality: "image"`, Cohere's /v1/embed and /v2/embed with `images` and `inputs`,
TEI's /embed for texts). An image arrives as an encoded file (a data URI decoded from base64 by the parser);
the front door decodes it, so the gateway never holds pixels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from embtrt_backend.kinds import MULTIMODAL
from embtrt_backend.options import ModelOptions

from ...scale.gateway.errors import ApiError
from ...scale.gateway.model import GatewayModel
from ...scale.gateway.served import Served
from ...serve import wire


@dataclass(frozen=True)
class MultimodalModel:
    """What the embed parsers need of a served text-and-image embedder (an embedder's EmbeddingsModel fields,
    and `images`: it takes images)."""

    options: ModelOptions
    vocab_size: int
    max_len: int
    max_text_bytes: int
    route: str = "frontdoor"
    token_ids: bool = False
    images: bool = True


def option_params(opts) -> dict:
    """A request's resolved options as the front door's request parameters (it resolves them again)."""
    p = {"prompt_name": opts.prompt_choice, "truncate": opts.truncate, "dimensions": opts.dimensions,
         "embedding_type": opts.embedding_type if opts.embedding_type != "float" else None}
    return {k: v for k, v in p.items() if v is not None}


class Multimodal(GatewayModel):
    kind, does, value = MULTIMODAL, "embeds every text and image", "vector"
    outputs = ("EMBEDDING", "TOKENS")
    probe = (("TEXT", "EMBEDDING"), ["embtrt readiness probe"])
    image_probe = ("IMAGE", "EMBEDDING")
    served_as = Served

    @property
    def schema(self) -> MultimodalModel:
        s = self.served
        return MultimodalModel(s.options, s.vocab_size, s.max_len, s.max_text_bytes)

    def facts(self) -> dict:
        return {"dim": self.served.options.dim, "modalities": ["text", "image"]}

    def tei_type(self) -> dict:
        """TEI's /info model_type: an embedding model, pooled as its text tower is (CLIP: its pooled output)."""
        return {"embedding": {"pooling": self.served.manifest.pooling}}

    def asked(self, how) -> tuple[str, ...]:
        return (how[1], "TOKENS")

    def inputs(self, items: list, how) -> list:
        return [wire.text_input(items, how[0])]

    def unpack(self, items: list, outs: tuple):
        return outs[0]

    async def embed(self, texts: list[str] | None, ids: list[list[int]] | None, opts=None) -> tuple[np.ndarray, int]:
        """Texts -> (vectors in input order, as the options ask; the tokens)."""
        if texts is None:
            raise ApiError(400, f"{self.served.name} is {self.kind.label}: it embeds texts and images, not token ids",
                           param="input")
        return await self.embed_items(texts, (), opts)

    async def embed_items(self, texts: list[str], media: tuple, opts=None, field: str = "input") -> tuple[np.ndarray, int]:
        """Items in input order, `media[k]` an image's encoded bytes (or None: texts[k] is a text; `media` empty:
        every item a text) -> (their vectors in input order; the texts' tokens). Texts and images go up in
        calls of their own modality, concurrently; a refused image or text is a 400 naming `field[k]`."""
        opts = opts if opts is not None else self.served.options.default
        out = opts.output
        return await self.send_items(texts, media, lambda modality: (modality, out), option_params(opts), field)

