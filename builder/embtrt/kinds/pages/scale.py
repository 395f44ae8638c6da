"""One page-image retriever behind the gateway (`Pages`): queries to the front door as TEXT, page images as IMAGE
(one modality per call: Triton's batch rule), each in parts of at most its max batch, concurrently; each item's
token vectors back in input order.

It serves the token-vector routes (scale/gateway/ops/tokens.py: TEI's /embed_all and vLLM's /pooling with
`input` texts are queries, as MultiVectorEncoder renders every text; vLLM's /pooling `messages` with one image_url
part is a page) and the rank routes (ops/rank.py): the query's vectors against each page's by
MaxSim (score_retrieval), the pages sent as data URIs: the Cohere / Jina / vLLM /v1/rerank, /v2/rerank and
/rerank bodies' `documents` strings, or vLLM's multimodal `documents: {"content": [image_url parts]}`. TEI's and
NIM's rerank bodies and vLLM's /score take text documents: refused, saying which routes take pages."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
from embtrt_backend.images import ImageLimits
from embtrt_backend.kinds import PAGES
from embtrt_backend.token_vectors import maxsim, unpadded

from ...scale.gateway.dialects import DOC_FIELDS
from ...scale.gateway.errors import ApiError
from ...scale.gateway.front_door import renamed
from ...scale.gateway.model import GatewayModel
from ...scale.gateway.images import image_bytes
from ...scale.gateway.served import ServedModel
from ...serve import wire

VECTORS = ("TOKEN_EMBEDDINGS", "TOKEN_COUNTS")
MAX_IMAGE_BYTES = ImageLimits.max_bytes
PAGE_ROUTES = "POST /v1/rerank, /v2/rerank or /rerank (documents as data URIs, or vLLM's image_url content)"


@dataclass(frozen=True)
class PagesModel:
    """What the token-vector and rank parsers need of a served page-image retriever: one score orders the pages
    (num_labels 1); a document is an image's data URI (max_text_bytes bounds its base64); no instruction."""

    dim: int
    max_text_bytes: int
    num_labels: int = 1
    takes_instruction: bool = False
    images: bool = True


@dataclass
class Encoded:
    vectors: list[np.ndarray]
    tokens: int = 0


class Pages(GatewayModel):
    kind, does, value = PAGES, "encodes every query and page image", "token vector"
    outputs = (*VECTORS, "TOKENS")
    probe = (("TEXT",), ["embtrt readiness probe"])
    image_probe = ("IMAGE",)
    served_as = ServedModel

    @property
    def dim(self) -> int:
        return int(self.served.door["embtrt.dim"])

    @property
    def max_image_bytes(self) -> int:
        """The front door's limit on an encoded page (its build's), checked here before a page is sent."""
        return int(self.served.door.get("image_max_bytes") or MAX_IMAGE_BYTES)

    @property
    def schema(self) -> PagesModel:
        return PagesModel(self.dim, self.max_image_bytes * 4 // 3 * 78 // 76 + 64)

    def facts(self) -> dict:
        return {"dim": self.dim, "modalities": ["text", "image"], "similarity": "maxsim",
                # image tokens and prompt: every page's (ColPali), or "per page" (ColQwen2: each at its own resolution)
                "page_positions": len(ids.split(",")) if (ids := self.served.door.get("pages_image_ids")) else "per page"}

    def tei_type(self) -> dict:
        return {"embedding": {"pooling": "multi-vector (page images)"}}

    def inputs(self, items: list, how) -> list:
        return [wire.text_input(items, how[0])]

    def unpack(self, items: list, outs: tuple) -> list[np.ndarray]:
        emb, counts = outs
        if emb.ndim != 3 or emb.shape[2] != self.dim or len(emb) != len(items):
            raise ApiError(502, f"{self.served.name}'s front door answered TOKEN_EMBEDDINGS {list(emb.shape)} for "
                           f"{len(items)} items; expected [{len(items)}, tokens, {self.dim}]", type_="server_error")
        return unpadded(emb, counts)

    def finite(self, rows) -> bool:
        return all(bool(np.all(np.isfinite(v))) for v in rows)

    async def _run(self, items: list, modality: str, field: str) -> Encoded:
        try:
            parts, tokens = await self.send(items, (modality,), None, field)
        except ApiError as exc:
            raise renamed(exc, field, list(range(len(items)))) from None
        return Encoded([v for p in parts for v in p], tokens)

    async def encode_texts(self, texts: list[str], side: str, outputs: tuple[str, ...], field: str,
                           prompt_name: str | None = None, truncate: str | None = None) -> Encoded:
        """Texts -> each one's token vectors as a query (the processor's query augmentation): a text is always a
        query here, as MultiVectorEncoder renders it; the pages are images (encode_images)."""
        for key, value in (("prompt_name", prompt_name), ("truncate", truncate)):
            if value is not None:
                raise ApiError(400, f"{key}: {self.served.name} is {self.kind.label}: its queries take no {key} (a query "
                               "over its length is refused, never cut)", param=key)
        if any(o not in VECTORS for o in outputs):
            raise ApiError(400, f"{self.served.name} is {self.kind.label}: it has token vectors only", param=field)
        self.admission.check_count(sum(map(len, texts)), field)
        return await self._run(texts, "TEXT", field)

    async def encode_images(self, images: list[str], field: str) -> Encoded:
        """Page images as data URIs -> each one's token vectors; a bad one a 400 naming `field[k]`."""
        files = [image_bytes(x, k, field, self.max_image_bytes) for k, x in enumerate(images)]
        return await self._run(files, "IMAGE", field)

    async def rerank(self, req) -> tuple[np.ndarray, int]:
        """The query's vectors against each page's by MaxSim, in document order; the query's tokens."""
        field = DOC_FIELDS.get(req.api, "documents")
        if req.api != "cohere":
            raise ApiError(400, f"{self.served.name} is {self.kind.label}: it ranks page images, which {PAGE_ROUTES} "
                           "take", param=field, code="wrong_operation")
        if req.instruction is not None or req.scoring:
            raise ApiError(400, f"{self.served.name} ranks by MaxSim: it takes no instruction, mode or weights",
                           param="instruction" if req.instruction is not None else "mode")
        q, d = await asyncio.gather(self.encode_texts([req.query], "query", VECTORS, "query"),
                                    self.encode_images(req.documents, field))
        return np.asarray([maxsim(q.vectors[0], v) for v in d.vectors], dtype=np.float32), q.tokens + d.tokens

    async def score_pairs(self, pairs, activation: str, field: str, truncate: bool = True,
                          truncation_direction: str = "right"):
        raise ApiError(400, f"{self.served.name} is {self.kind.label}: vLLM's /score takes text pairs; rank page images "
                       f"on {PAGE_ROUTES}", param=field, code="wrong_operation")
