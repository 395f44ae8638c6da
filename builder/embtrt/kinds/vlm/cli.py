"""The VLM embedder's side of the `embtrt` CLI: its `embtrt bench --vlm-images` scenarios (Kind.bench_cli)."""

from __future__ import annotations


def bench(o) -> None:
    """`embtrt bench --vlm-images FOLDER`: the --model targets at each concurrency on the folder's images, and the model
    card's computation in process on the same images when --reference is given."""
    from embtrt_backend.kinds.vlm import KIND

    from ...cli.measure_kinds import emit
    from ...common.options import parse_int_list
    from ...reference.images import image_files
    from .measure_bench import bench_vlm

    o.require_models("--vlm-images", "the VLM embedder")
    o.require_reference("--vlm-images", "the model card's computation in process")
    rows = bench_vlm(o.url, list(o.models), image_files(o.picked), parse_int_list("concurrency", o.concurrency) or (1,),
                     o.texts_per_request, o.requests, o.warmup, o.reference if o.inprocess else None,
                     progress=o.progress(), trust_remote_code=o.trust_remote_code)
    emit({"kind": KIND.name, "results": rows},
         {"target": "target", "conc": "concurrency", "images/request": "images_per_request"}, "images", o.out_dir, o.as_json)
