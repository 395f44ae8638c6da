"""The page-image retriever (#70, ColPali-style): a vision-language model that reads a page image's patches in one
sequence with a short prompt and gives one vector per position (transformers' ColPaliForRetrieval: the projection,
L2-normalised per token). A text is a query (the processor's query augmentation); an image is a document; they
are scored by MaxSim (score_retrieval). A request carries one modality: TEXT or IMAGE."""

from ..base import TEXT_OR_IMAGE, TOKEN_VECTORS, Kind

KIND = Kind(
    name="pages", label="a page-image retriever", reference="ColPaliForRetrieval or ColQwen2ForRetrieval",
    operations=("token_vectors", "rank"), metric_route="pages",
    served_routes="POST /embed_all, /pooling (queries; vLLM's messages: a page image), or /v1/rerank, /v2/rerank, /rerank "
                  "(a query against page images as data URIs: MaxSim)",
    client_hint="get token vectors of queries and page images with PageImageClient",
    front_door="router", input=TEXT_OR_IMAGE, heads=(TOKEN_VECTORS,), door="PagesDoor",
    torch_encoder="kinds.pages.torch:TorchPages", encoder_output="embeddings",
    build="embtrt.kinds.pages.export:build_pages_in",
    spec_fields="embtrt.kinds.pages.export:spec_fields",
    gateway_model="embtrt.kinds.pages.scale:Pages", measure="embtrt.kinds.pages.measure:PagesMeasure",
    client="embtrt.kinds.pages.serve:PageImageClient", packages=("pillow",),
    bench_cli="embtrt.kinds.pages.cli:bench", bench_flag="--pages", targets=("python-torch",),
)
