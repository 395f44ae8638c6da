"""The VLM embedder (#70 item 2, Qwen3-VL-Embedding-style): a vision-language model that reads a text, an image, or
both fused in one sequence (the model's chat template: the instruction as the system message, the user's image and
text), one vector per input: the last attended position's hidden state, L2-normalised (the model card's recipe, the
sentence-transformers modules Transformer, last-token Pooling, Normalize)."""

from ..base import POOLED, TEXT_AND_IMAGE, Kind

KIND = Kind(
    name="vlm", label="a VLM embedder", reference="the model card's recipe (transformers, last-token pooling)",
    operations=("embed",), metric_route="embeddings",
    served_routes="POST /v1/embeddings (modality text or image; vLLM's messages: a text fused with an image), "
                  "/embeddings, /v2/embed (Cohere's images and inputs, two-part ones fused)",
    client_hint="embed texts, images or both fused with VlmEmbeddingClient",
    front_door="router", input=TEXT_AND_IMAGE, heads=(POOLED,), door="VlmDoor",
    torch_encoder="kinds.vlm.torch:TorchVlm", encoder_output="embedding",
    build="embtrt.kinds.vlm.export:build_vlm_in", spec_fields="embtrt.kinds.vlm.export:spec_fields",
    gateway_model="embtrt.kinds.vlm.scale:Vlm", measure="embtrt.kinds.vlm.measure:VlmMeasure",
    client="embtrt.kinds.vlm.serve:VlmEmbeddingClient", packages=("pillow",), targets=("python-torch",),
    bench_cli="embtrt.kinds.vlm.cli:bench", bench_flag="--vlm-images",
)
