"""The page-image kind's side of the `embtrt` CLI: its `embtrt bench --pages` scenarios (Kind.bench_cli)."""

from __future__ import annotations


def bench(o) -> None:
    """`embtrt bench --pages FOLDER`: the --model targets at each concurrency on the folder's page images, and in-process
    ColPaliForRetrieval on the same pages when --reference is given."""
    from embtrt_backend.kinds.pages import KIND

    from ...cli.measure_kinds import emit
    from ...common.options import parse_int_list
    from ...reference.images import image_files
    from .measure_bench import bench_pages

    o.require_models("--pages", "the page-image retriever")
    o.require_reference("--pages", "in-process ColPaliForRetrieval")
    rows = bench_pages(o.url, list(o.models), image_files(o.picked), parse_int_list("concurrency", o.concurrency) or (1,),
                       o.texts_per_request, o.requests, o.warmup, o.reference if o.inprocess else None,
                       progress=o.progress(), trust_remote_code=o.trust_remote_code)
    emit({"kind": KIND.name, "results": rows},
         {"target": "target", "conc": "concurrency", "images/request": "images_per_request"}, "images", o.out_dir, o.as_json)
