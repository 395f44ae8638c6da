"""The text-and-image kind's side of the `embtrt` CLI: its `embtrt bench --images` scenarios (Kind.bench_cli)."""

from __future__ import annotations


def bench(o) -> None:
    """`embtrt bench --images`: the --model targets at each concurrency on the folder's images, and in-process
    SentenceTransformer.encode of the same images when --reference is given."""
    from embtrt_backend.kinds.multimodal import KIND

    from ...cli.measure_kinds import emit
    from ...common.options import parse_int_list
    from .measure_bench import bench_images, image_files

    o.require_models("--images", "the text-and-image model")
    o.require_reference("--images", "in-process SentenceTransformer.encode")
    rows = bench_images(o.url, list(o.models), image_files(o.picked), parse_int_list("concurrency", o.concurrency) or (1,),
                        o.texts_per_request, o.requests, o.warmup, o.reference if o.inprocess else None,
                        progress=o.progress(), trust_remote_code=o.trust_remote_code)
    emit({"kind": KIND.name, "results": rows},
         {"target": "target", "conc": "concurrency", "images/request": "images_per_request"}, "images", o.out_dir, o.as_json)
