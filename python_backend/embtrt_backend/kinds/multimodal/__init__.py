"""The text-and-image embedder: a sentence-transformers folder of a CLIP-style model (a text tower and an
image tower projected into one space: `SentenceTransformer.encode` of texts and of images), one vector per
text or image. A request carries one modality: TEXT (the embedder's request core, the text tower per
bucket) or IMAGE (encoded files, decoded and preprocessed as the model's processor does, the image tower)."""

import base64

from ..base import Kind

# an 8 x 8 seeded PNG: the front door's warm-up image and the gateway's readiness probe of the image path
# (a constant: the gateway decodes nothing and has no Pillow)
PROBE_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAA00lEQVR42gHIADf/AEtwnMH9N9kCPR+irVKHCrhoVlPPaMDEVAOY3eLFhbMw5tS/"
    "7tSaLaJO6RkweesEKUUB32qR4awP+rtAdINRPzPZROHAGVX+fNM3AhAYkA1s3xXzWe0Kd/Osq5kFapQ+DcmTTgQoulsTrdplsHD9+Gs5rxMInTwk"
    "akK9fRcDDOEgKTPuaWcF3oWmc8YKIEgdO/f2y9F2BPVYJOOhla5M/rs3TxTwANH9AMuOABWrqwM6BxYOyiRc50f2pSvkY+dW6HANMqwHmXB4HF1y"
    "3kHrCQAAAABJRU5ErkJggg==")

KIND = Kind(
    name="multimodal", label="a text-and-image embedder", reference="SentenceTransformer",
    operations=("embed",), metric_route="embeddings",
    served_routes="POST /v1/embeddings (modality text or image), /embeddings (infinity's modality), /v2/embed "
                  "(Cohere's images and inputs)",
    client_hint="embed texts and images with ImageEmbeddingClient / `embtrt embed --image`",
    front_door="router", inputs=("TEXT",), probe_output="EMBEDDING", door="MultimodalDoor",
    torch_encoder="TorchClip", encoder_output="text_embeds",
    build="embtrt.kinds.multimodal.export:build_multimodal_in",
    spec_fields="embtrt.kinds.multimodal.export:spec_fields",
    gateway_model="embtrt.kinds.multimodal.scale:Multimodal",
    measure="embtrt.kinds.multimodal.measure:MultimodalMeasure", packages=("pillow",),
)
