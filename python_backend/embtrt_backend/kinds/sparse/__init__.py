"""The sparse encoder: sentence-transformers' SparseEncoder (SPLADE), a vocabulary-sized weight vector per text."""

from ..base import Kind

KIND = Kind(
    name="sparse", label="a sparse encoder", reference="SparseEncoder",
    operations=("embed_sparse",), metric_route="sparse",
    served_routes="POST /v1/sparse or /embed_sparse (TEI)",
    client_hint="get its active dimensions with SparseClient / `embtrt sparse` (docs/sparse.md)",
    front_door="router", inputs=("TEXT",), probe_output="SPARSE_VALUES", door="SparseDoor", torch_encoder="TorchSplade",
    encoder_output="sparse",
    build="embtrt.kinds.sparse.export:build_sparse_in", spec_fields="embtrt.kinds.sparse.export:spec_fields",
    gateway_model="embtrt.kinds.sparse.scale:Sparse",
    measure="embtrt.kinds.sparse.measure:SparseMeasure",
    gateway_operations="embtrt.kinds.sparse.scale_schema:OPERATIONS",
    plan_check="embtrt.kinds.sparse.reference_gate:plan_check",
    cli="embtrt.kinds.sparse.cli",
)
