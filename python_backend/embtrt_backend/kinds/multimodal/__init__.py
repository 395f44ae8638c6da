"""The text-and-image embedder: a sentence-transformers folder of a CLIP-style model (a text tower and an
image tower projected into one space: `SentenceTransformer.encode` of texts and of images), one vector per
text or image. A request carries one modality: TEXT (the embedder's request core, the text tower per
bucket) or IMAGE (encoded files, decoded and preprocessed as the model's processor does, the image tower)."""

from ..base import TEXT_OR_IMAGE, POOLED, Kind

KIND = Kind(
    name="multimodal", label="a text-and-image embedder", reference="SentenceTransformer",
    operations=("embed",), metric_route="embeddings",
    served_routes="POST /v1/embeddings (modality text or image), /embeddings (infinity's modality), /v2/embed "
                  "(Cohere's images and inputs)",
    client_hint="embed texts and images with ImageEmbeddingClient / `embtrt embed --image`",
    front_door="router", input=TEXT_OR_IMAGE, heads=(POOLED,), door="MultimodalDoor",
    torch_encoder="TorchClip", encoder_output="text_embeds",
    build="embtrt.kinds.multimodal.export:build_multimodal_in",
    spec_fields="embtrt.kinds.multimodal.export:spec_fields",
    gateway_model="embtrt.kinds.multimodal.scale:Multimodal",
    measure="embtrt.kinds.multimodal.measure:MultimodalMeasure", packages=("pillow",),
    client="embtrt.kinds.multimodal.serve:ImageEmbeddingClient",
    bench_cli="embtrt.kinds.multimodal.cli:bench", bench_flag="--images",
)
