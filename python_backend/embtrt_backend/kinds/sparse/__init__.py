"""The sparse encoder: sentence-transformers' SparseEncoder (SPLADE), a vocabulary-sized weight vector per text."""

from ..base import TEXT_SIDES, SPARSE_WEIGHTS, Kind

KIND = Kind(
    name="sparse", label="a sparse encoder", reference="SparseEncoder",
    operations=("embed_sparse",), metric_route="sparse",
    served_routes="POST /v1/sparse or /embed_sparse (TEI)",
    client_hint="get its active dimensions with SparseClient / `embtrt sparse` (docs/sparse.md)",
    front_door="router", input=TEXT_SIDES, heads=(SPARSE_WEIGHTS,), door="SparseDoor", torch_encoder="TorchSplade",
    encoder_output="sparse",
    build="embtrt.kinds.sparse.export:build_sparse_in", spec_fields="embtrt.kinds.sparse.export:spec_fields",
    gateway_model="embtrt.kinds.sparse.scale:Sparse",
    measure="embtrt.kinds.sparse.measure:SparseMeasure",
    cli="embtrt.kinds.sparse.cli", client="embtrt.kinds.sparse.serve:SparseClient",
    bench_cli="embtrt.kinds.sparse.cli:bench", bench_flag="--sparse",
)
