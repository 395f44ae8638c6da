"""The multi-vector encoder: sentence-transformers' MultiVectorEncoder (ColBERT: a vector per token,
late interaction by MaxSim), and bge-m3-style folders (FlagEmbedding's BGEM3FlagModel: the dense
vector, the lexical weights and the ColBERT vectors from one encoder pass)."""

from ..base import TEXT, TOKEN_VECTORS, Kind

KIND = Kind(
    name="multivector", label="a multi-vector encoder", reference="MultiVectorEncoder",
    operations=("token_vectors", "rank", "encode"), metric_route="multivector",
    served_routes="POST /embed_all (TEI), /pooling (vLLM), /v1/encode, or the rerank routes (MaxSim)",
    client_hint="get token vectors with MultiVectorClient / `embtrt encode`, rank through the gateway's rerank routes",
    front_door="router", input=TEXT, heads=(TOKEN_VECTORS,), door="MultiVectorDoor",
    torch_encoder="TorchMultiVector", encoder_output="token_vectors",
    build="embtrt.kinds.multivector.export:build_multivector_in",
    spec_fields="embtrt.kinds.multivector.export:spec_fields",
    gateway_model="embtrt.kinds.multivector.scale:MultiVector",
    measure="embtrt.kinds.multivector.measure:MultiVectorMeasure",
    cli="embtrt.kinds.multivector.cli", client="embtrt.kinds.multivector.serve:MultiVectorClient",
    rank_inprocess="embtrt.kinds.multivector.measure:inprocess_maxsim_rows",
)
