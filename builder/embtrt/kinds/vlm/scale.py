"""One VLM embedder behind the gateway (`Vlm`): texts to the front door as TEXT, images as IMAGE (one modality per
call), each in parts of at most its max batch, concurrently; the vectors back in input order, the request's width
and vector type applied here (the front door returns the model's normalised vectors; `dimensions` truncates and
renormalises them, as for every pooled model). It serves the embed operation's routes with texts and images as the
text-and-image kind is served (OpenAI's and NIM's /v1/embeddings with `modality`, infinity's /embeddings, Cohere's
/v2/embed `images` and one-part `inputs`); a text fused with an image as Cohere v2's two-part `inputs` or vLLM's
`messages` (scale.gateway.images), sent as TEXT and IMAGE rows side by side; the request's instruction (the system
message, or `instruction`) as the front door's parameter, else the model card's default."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from embtrt_backend.kinds import VLM
from embtrt_backend.options import ModelOptions

from ...scale.gateway.errors import ApiError
from ...scale.gateway.model import GatewayModel
from ...scale.gateway.served import ServedModel
from ...serve import wire


@dataclass(frozen=True)
class VlmModel:
    """What the embed parsers need of a served VLM embedder (an embedder's EmbeddingsModel fields; it takes images)."""

    options: ModelOptions
    vocab_size: int
    max_len: int
    max_text_bytes: int
    route: str = "frontdoor"
    token_ids: bool = False
    images: bool = True
    fused: bool = True   # a text fused with an image is one input; an instruction per request


class ServedVlm(ServedModel):
    """A VLM embedder: its request options (width and vector types, applied by the gateway; no prompts)."""

    def __init__(self, repo) -> None:
        super().__init__(repo)
        self.options = ModelOptions(dim=int(self.door["embtrt.dim"]), normalize=True, prompts={})


class Vlm(GatewayModel):
    kind, does, value = VLM, "embeds every text and image", "vector"
    outputs = ("EMBEDDING", "TOKENS")
    probe = (("TEXT",), ["embtrt readiness probe"])
    image_probe = ("IMAGE",)
    served_as = ServedVlm

    @property
    def options(self) -> ModelOptions:
        return self.served.options

    @property
    def schema(self) -> VlmModel:
        s = self.served
        return VlmModel(self.options, s.plain_tokenizer.get_vocab_size(with_added_tokens=True), s.max_len, s.max_text_bytes)

    def facts(self) -> dict:
        return {"dim": self.options.dim, "modalities": ["text", "image"]}

    def tei_type(self) -> dict:
        return {"embedding": {"pooling": "last-token"}}

    def inputs(self, items: list, how) -> list:
        if len(how) == 2:   # fused: (text, image) pairs, TEXT and IMAGE rows side by side
            return [wire.text_input([t for t, _ in items], how[0]), wire.text_input([b for _, b in items], how[1])]
        return [wire.text_input(items, how[0])]

    def unpack(self, items: list, outs: tuple):
        return outs[0]

    async def embed(self, texts: list[str] | None, ids: list[list[int]] | None, opts=None) -> tuple[np.ndarray, int]:
        if texts is None:
            raise ApiError(400, f"{self.served.name} is {self.kind.label}: it embeds texts and images, not token ids",
                           param="input")
        return await self.embed_items(texts, (), opts)

    async def embed_items(self, texts: list[str], media: tuple, opts=None, field: str = "input",
                          instruction: str | None = None, names: tuple[str, ...] = ()) -> tuple[np.ndarray, int]:
        """Items in input order (`media[k]` an image's encoded bytes, a Fused image with texts[k], or None: texts[k] is
        a text) -> (their vectors, with the request's width and type; the tokens); `instruction` the system message
        (None: the model's default); `names`: each item's name in a refusal (a message's index)."""
        opts = opts if opts is not None else self.options.default
        params = {"instruction": instruction} if instruction is not None else None
        vecs, tokens = await self.send_items(texts, media, lambda modality: tuple(modality.split("+")), params, field,
                                             names)
        return self.options.finish(vecs, opts), tokens
