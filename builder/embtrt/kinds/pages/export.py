"""`embtrt build` of a page-image retriever (#70, ColPali-style) on python-torch: the folder's model runs in the
front door (1/hf/, ColPaliForRetrieval on PyTorch) -> the serving tokenizer checked against the processor's
queries and image sequence -> the gate on the front door's own core (kinds.pages.core) against the reference
(kinds.pages.reference: ColPaliForRetrieval on ColPaliProcessor's output, PIL backend) on real texts as queries and
16 seeded page images -> manifest -> check. docs/visual-documents.md has the contract.

Only python-torch builds: the vision-language model's ONNX export (the image features scattered into the text
sequence, then the whole decoder) is not done, and the other targets are refused saying so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from embtrt_backend.kinds import PAGES

from ...errors import ParityError, SpecError
from ...export.render import _t
from ...export.single import FrontDoorBuild
from ...reference.images import data_uri, gate_images
from ...reference.modelinfo import one_input_buckets
from .reference import PagesInfo, encode_images, encode_queries, info_of, load_reference, score
from .reference_gate import judge

IMAGE_MAX_BATCH = 8     # pages per model run
GATE_QUERIES = 24
DEFAULT_QUERY_TOKENS = 512


class PagesBuild(FrontDoorBuild):
    kind, changes = PAGES, "token vectors"
    reference = "ColPaliForRetrieval or ColQwen2ForRetrieval on its processor's queries and images (PIL backend, fp32)"
    targets_why = ("the vision-language model's ONNX export is not done, so no ONNX Runtime, OpenVINO or TensorRT "
                   "graph exists")

    @property
    def info(self) -> PagesInfo:
        return self._info

    @property
    def width(self) -> int:
        return self.info.dim

    def reading(self) -> str:
        i = getattr(self, "_info", None)
        if i is None:
            return "a page-image retriever (ColPali or ColQwen2-style)"
        if i.family == "qwen2":
            return (f"a page-image retriever (ColQwen2-style, transformers' positions: pages at their own resolution, at "
                    f"most {i.image_tokens} image tokens; queries up to {self.spec.max_seq_length} tokens; {i.dim}-wide "
                    "token vectors)")
        return (f"a page-image retriever (ColPali-style: pages {i.image_size[1]} x {i.image_size[0]} as {i.image_tokens} "
                f"image tokens; queries up to {self.spec.max_seq_length} tokens; {i.dim}-wide token vectors)")

    def load(self):
        s = self.spec
        if s.router_mode != "local":
            raise SpecError("--router-encoder bls with python-torch: a page-image retriever's model rides with its front door",
                            "leave --router-encoder at auto (local)")
        if s.precision != "fp32":
            raise SpecError(f"--precision {s.precision}: page-image retrievers are gated at fp32 only today",
                            "build with --precision fp32")
        ref = load_reference(s.model_dir, s.trust_remote_code)
        self._info = info_of(ref)
        self.log(f"      {self.reading()}")
        return ref

    def hf_tokenizer(self, ref):
        return ref.tokenizer

    def core_config(self, pad_id: int):
        from embtrt_backend.kinds.pages.core import PagesConfig

        i = self.info
        return PagesConfig(dim=i.dim, query_prefix=i.query_prefix, query_suffix=i.query_suffix, image_ids=i.image_ids,
                           max_query_tokens=self.spec.max_seq_length, pad_id=pad_id, max_batch=self.spec.max_batch_size,
                           family=i.family)

    def check_tokenizer(self, hf_tok, tok_json: Path, pad_id: int, work: Path, texts: list[str]) -> None:
        """The front door's query ids (its prefix, the text, the augmentation) equal processor(text=...)'s; the image
        sequence is the processor's own (read from it)."""
        from tokenizers import Tokenizer

        from embtrt_backend.kinds.pages.core import PagesCore

        tok = Tokenizer.from_file(str(tok_json))
        tok.no_padding()
        tok.no_truncation()
        core = PagesCore(self.core_config(pad_id), tok, None)
        short = self.queries(core, texts)
        ours = core.query_ids(short)
        batch = self.ref.processor(text=short)
        theirs = [np.asarray(i)[np.asarray(m, bool)] for i, m in zip(batch["input_ids"], batch["attention_mask"])]
        bad = [k for k, (a, b) in enumerate(zip(ours, theirs)) if not np.array_equal(a, b)]
        if bad:
            raise ParityError(f"the serving tokenizer differs from the processor's on {len(bad)} queries (first: "
                              f"{short[bad[0]][:60]!r})", "the tokenizer.json lacks settings of the processor's tokenizer")
        self.log(f"[ok] serving tokenizer equals the processor's on {len(short)} queries; " + (
            f"an image's sequence is {len(self.info.image_ids)} tokens ({self.info.image_tokens} image tokens)"
            if self.info.family != "qwen2" else f"an image's sequence its visual prompt with up to {self.info.image_tokens} "
            "image tokens (checked in the gate: the vectors of every page's sequence)"))

    @staticmethod
    def queries(core, texts: list[str]) -> list[str]:
        """The texts that are queries within the model's length (longer ones are refused, not cut)."""
        return [t for t in texts if len(core.query_ids_unbounded([t])[0]) <= core.cfg.max_query_tokens]

    def params(self, pad_id: int) -> dict[str, str]:
        i = self.info
        # on CUDA, queries run on CUDA graphs per (bucket, batch size) padded to the bucket; a ColPali page (one sequence
        # length, one pixel shape) on graphs of its own per batch size; a ColQwen2 page (its size varies) eagerly
        return {**super().params(pad_id), **self.image_graphs(), "overflow": "reject", "overflow_stride": "0", "embtrt.dim": str(i.dim),
                "pooler": "fused", "normalize": "false", "dimensions": "", "include_prompt": "true", "trim_padding": "false",
                "pages_query_prefix": i.query_prefix, "pages_query_suffix": i.query_suffix, "pages_family": i.family,
                **({"pages_image_prompt": i.image_prompt, "pages_image_token": i.image_token} if i.family == "qwen2" else
                   {"pages_image_ids": ",".join(map(str, i.image_ids))}),
                "max_batch_size": str(self.spec.max_batch_size),
                "image_max_batch": str(self.image_max_batch)}

    def image_graphs(self) -> dict[str, str]:
        """python-torch on CUDA with graphs, a ColPali page: its static shapes (the page sequence's length, batch sizes
        up to image_max_batch) and its pixel_values' shape per row."""
        from embtrt_backend.torch_graphs import format_graph_shapes, graph_batch_sizes

        s, i = self.spec, self.info
        if not (s.target == "python-torch" and s.device == "cuda" and s.cuda_graphs and i.family == "paligemma"):
            return {}
        return {"image_graph_shapes": format_graph_shapes({len(i.image_ids): graph_batch_sizes(self.image_max_batch)}),
                "image_graph_input": "pixel_values:" + ",".join(map(str, i.pixel_shape)),
                "image_graph_ids": ",".join(map(str, i.image_ids))}

    @property
    def image_max_batch(self) -> int:
        return min(IMAGE_MAX_BATCH, self.spec.max_batch_size)

    def outputs(self) -> list[dict]:
        return [_t("TOKEN_EMBEDDINGS", "TYPE_FP32", [-1, self.info.dim]), _t("TOKEN_COUNTS", "TYPE_INT64", [1]),
                _t("TOKENS", "TYPE_INT64", [1])]

    def gating(self, texts: list[str]) -> str:
        return (f"served token vectors vs {type(self.ref.model).__name__} on {min(GATE_QUERIES, len(texts))} real texts as "
                "queries and 16 seeded page images, and their MaxSim scores vs score_retrieval")

    def _processor_file(self, work: Path) -> Path:
        """image_processor.json in the work folder (the gate's core reads it, then the front door's folder): written once."""
        path = work / "image_processor.json"
        if not path.exists():
            path.write_text(json.dumps(self.info.processor, sort_keys=True), encoding="utf-8")
        return path

    def gate(self, ref, params: dict[str, str], encoder, work: Path, texts: list[str]) -> dict:
        from transformers.image_utils import load_image

        from embtrt_backend.kinds.pages.core import PagesCore, QueryRequest

        if self.info.family == "paligemma":   # ImageCore reads it; a ColQwen2 page's processor is read from hf/
            self._processor_file(work)
        elif not (work / "hf").exists():   # its image processor, read as the front door reads 1/hf/
            import shutil

            shutil.copytree(self.spec.model_dir, work / "hf", ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
        core = PagesCore.from_folder(str(work), params)
        queries = self.queries(core, texts)[:GATE_QUERIES]
        files = gate_images()
        got_q = core.run_queries([QueryRequest(core.query_ids(queries[a:a + 8])) for a in range(0, len(queries), 8)],
                                 encoder)
        got_p = core.run_images([core.prepare_images([f for f, _ in files[a:a + 4]]) for a in range(0, len(files), 4)],
                                encoder)
        for o in (*got_q, *got_p):
            if o.error is not None:
                raise o.error
        served = {"queries": [v for o in got_q for v in o.vectors], "images": [v for o in got_p for v in o.vectors]}
        want = {"queries": encode_queries(ref, queries),
                "images": encode_images(ref, [load_image(data_uri(f, fmt)) for f, fmt in files])}
        return judge(served, want, score(ref, want["queries"], want["images"]), self.log).as_dict(lines=False)

    def files(self, work: Path) -> dict[str, Path]:
        if self.info.family == "qwen2":   # its image processor is read from 1/hf/ (the model's own files)
            return {}
        return {"1/image_processor.json": self._processor_file(work)}

    def manifest_fields(self) -> dict:
        return {"pooling": "tokens-pages", "pooler": "fused"}


build_pages_in = PagesBuild.build_in


def spec_fields(model_dir: Path, max_seq_length: int | None, bucket_t: tuple[int, ...] | None, trust_remote_code: bool,
                overrides: dict[str, str], default_prompt: str | None, default_name: str | None) -> dict:
    """A page-image retriever's spec fields: the query length (the bucket), the token vectors' width; no prompts (the
    processor's query prefix and augmentation are the model's own)."""
    if overrides or default_prompt is not None:
        raise SpecError("a page-image retriever takes no prompts: its processor's query prefix is the model's own",
                        "leave --prompt and --default-prompt out")
    ref = load_reference(model_dir, trust_remote_code)
    info = info_of(ref)
    seq = max_seq_length or min(info.max_length, DEFAULT_QUERY_TOKENS)
    if seq > info.max_length:
        raise SpecError(f"--max-seq-length {seq}: the model takes at most {info.max_length} positions",
                        f"give at most {info.max_length}")
    buckets = one_input_buckets(bucket_t, seq)
    names = ("input_ids", "attention_mask") + (("token_type_ids",) if info.family == "paligemma" else ())
    return dict(kind=PAGES.name, max_seq_length=seq, buckets=buckets, hidden_size=info.dim,
                input_names=names, pooling="cls", normalize=False,
                pooler="fused", prompts=(), default_prompt_name=None, overflow_stride=0)
