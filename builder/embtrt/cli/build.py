"""`embtrt build`: the command's options are the spec's options (export/spec_options.py spec_from_options);
export/pipeline.py's build() writes the repository (the kind's build, Kind.build)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from embtrt_backend.kinds import NAMES

from ..errors import require_extra
from ..reference.detect import rules_help
from .app import app, out, progress_log

KIND_HELP = (f"auto | {' | '.join(NAMES)}. Default auto: the first of these rules that matches the folder decides, "
             f"and the build log names it: {rules_help()}. --kind reranker / classifier chooses between those two for a "
             "*ForSequenceClassification folder, --kind embedder serves a bge-m3 folder's dense vector alone; asking for "
             "another kind than the folder is is an error that says what it is (docs/kinds.md, docs/rerankers.md, "
             "docs/classifiers.md, docs/multivector.md).")


@app.command()
def build(
    ctx: typer.Context,
    model_dir: Optional[Path] = typer.Argument(None, help="Hugging Face / sentence-transformers model folder. Default: the bundled all-MiniLM-L6-v2."),
    out_dir: Path = typer.Option(..., "--out", help="Repository folder to write (required); it must not be a file, and must be empty unless --force."),
    kind: str = typer.Option("auto", help=KIND_HELP),
    name: Optional[str] = typer.Option(None, help="Front-door model name: a letter, then up to 63 letters, digits, '_' or '-'. Default: derived from the folder, sanitized ([A-Za-z0-9_-])."),
    target: str = typer.Option("auto", help="auto | python-ort | python-openvino | python-torch | onnxruntime | tensorrt. Default auto: tensorrt when CUDA and TensorRT import, else python-ort; a kind that builds for some targets only, its own (a page-image retriever: python-torch). python-openvino (bf16 on AMX) is the fastest CPU target that passes the gate."),
    buckets: Optional[str] = typer.Option(None, help="Input-length buckets in tokens, e.g. 32,128,256 (strictly increasing, the largest the max sequence length). Default: 32,128,512,... below the max sequence length, then the max."),
    max_seq_length: Optional[int] = typer.Option(None, help="Max tokens per text. Default: the reference's (sentence_bert_config.json), e.g. 256 for MiniLM."),
    pooling: str = typer.Option("auto", help="auto | cls | mean | last-token. Default auto: from 1_Pooling/config.json; cls for encoders, last-token for decoders without one."),
    normalize: Optional[bool] = typer.Option(None, "--normalize/--no-normalize", help="L2-normalize vectors. Default: as the model's Normalize module says (on when not a sentence-transformers folder)."),
    pooler: Optional[str] = typer.Option(None, help="fused | python. Default fused: pooling + L2 inside the ONNX graph; python: a Python-backend pooler model (the default for a model whose Pooling config says include_prompt false: prompt tokens are left out of pooling, outside the graph)."),
    prompt: Optional[list[str]] = typer.Option(None, help="NAME=TEXT: a prompt requests may pick by prompt_name (input_type query / passage / document maps onto query / passage or document). Repeatable; overrides the model's config_sentence_transformers.json. Default: the model's prompts."),
    default_prompt: Optional[str] = typer.Option(None, help="NAME | none: the prompt applied when a request picks none, as SentenceTransformer.encode does. Default: the model's default_prompt_name."),
    pair_template: Optional[str] = typer.Option(None, help="An LLM-style reranker's prompt template: qwen3-reranker (Qwen3-Reranker's model card), or JSON (a file, or the text) of prefix, middle (with {instruction}, {query}, {document}), suffix and instruction. Default: qwen3-reranker for a causal-LM reranker folder, none otherwise (give it for a sequence-classification conversion of Qwen3-Reranker)."),
    instruction: Optional[str] = typer.Option(None, help="The pair template's default instruction (a request's `instruction` option overrides it). Default: the template's."),
    dimensions: Optional[str] = typer.Option(None, help="Matryoshka widths a request may ask for, e.g. 64,128,256,512,1024 (from the model card). Default: any width from 1 to the model's dimension."),
    max_batch_size: int = typer.Option(32, help="Largest batch of any model (the front door's max_batch_size), 1 .. 4096. Default 32."),
    max_batch_tokens: int = typer.Option(16384, help="Token budget per encoder run: each bucket's max batch (config, preferred sizes, TensorRT profile, CUDA graphs, warm-up) is min(--max-batch-size, budget // bucket length). Default 16384."),
    max_queue_delay_us: int = typer.Option(0, help="Dynamic batching max_queue_delay_microseconds, 0 .. 10000000: how long a request may wait for a preferred batch size while an instance is idle. Default 0: a batch is formed as soon as an instance is free, from what is queued (under load the queue fills while the instances work); docs/performance.md measures 2000 (the seed's) against 0."),
    preferred_batch_sizes: Optional[str] = typer.Option(None, help="Dynamic batching preferred_batch_size list, e.g. 8,16,32. Default: up to three powers of two ending at max-batch-size."),
    instances: int = typer.Option(1, help="instance_group count per model, 1 .. 64. Default 1."),
    encoder_instances: Optional[int] = typer.Option(None, help="instance_group count of each bucket's encoder. Default: 2 for the python-* targets (one instance showed 5 s stalls in Triton 2.51's dynamic batcher under load through the gateway), else --instances."),
    front_door_instances: Optional[int] = typer.Option(None, help="instance_group count of the front door. Default: 2 when it runs the encoder itself (python-* targets; one instance showed 500 ms stalls in Triton's dynamic batcher under load), else --instances. 1 gives the lowest single-request latency."),
    precision: str = typer.Option("fp32", help="fp32 | fp16 | bf16 | int8 | fp8. Default fp32. python-ort: fp32, int8; python-openvino, python-torch: fp32, bf16 (python-torch --device cuda: fp16 too); onnxruntime: fp32, fp16 (ModelOpt AutoCast graph), int8; tensorrt: all, written into the ONNX (fp16/bf16: ModelOpt AutoCast; int8/fp8: ModelOpt Q/DQ) and gated on this CPU. Rerankers and sparse encoders take the same precisions per target, the reduced ones behind their kind's reduced-precision gate."),
    overflow: str = typer.Option("truncate", help="truncate | reject | chunk texts longer than the max sequence length. truncate: as sentence-transformers; reject: that request fails; chunk: the front door embeds max-length windows (overlapping by --overflow-stride) and returns their mean, normalized as the model does (an approximation). Default truncate."),
    overflow_stride: int = typer.Option(32, help="--overflow chunk: tokens shared by consecutive windows. Default 32."),
    max_queue_size: int = typer.Option(256, help="Bounded queue per model; overload is rejected at once. 0 = unbounded. Default 256."),
    queue_timeout_us: int = typer.Option(30_000_000, help="Requests waiting longer in the queue are rejected. Default 30000000 (30 s)."),
    ort_threads: int = typer.Option(0, help="Encoder threads per instance (ONNX Runtime intra-op, OpenVINO streams, PyTorch). Default 0 (the runtime decides: the cores). 1 with two instances on a small host serves more short requests under load but runs a lone long text on one core (docs/performance.md); the tokenizer's threads are sized from the host either way."),
    router_encoder: str = typer.Option("auto", help="auto | local | bls. How the front door runs the encoder: local = the encoder runs inside the front door (one stub hop less); bls = calls each bucket's encoder model. Default auto: local for the python-* targets, bls for onnxruntime and tensorrt."),
    active_dims_in_graph: bool = typer.Option(False, help="Sparse encoders whose folder sets max_active_dims K: keep each text's K largest weights inside the ONNX graph (TopK on the device for tensorrt; in PyTorch for python-torch) instead of in the front door; requests may then ask for at most K. Default off."),
    ort_spinning: bool = typer.Option(False, help="Let ONNX Runtime threads spin-wait. Default off (on 2 cores it stalled requests by ~500 ms)."),
    stage_timers: bool = typer.Option(False, "--stage-timers/--no-stage-timers", help="The front door times each stage of its execute() (read, parse, tokenize, plan, pad, encode, pool, finish, respond) and exports the sums as Triton metrics (embtrt_frontdoor_stage_seconds_total{model,stage}), for docs/performance.md's breakdown. Default off (no cost)."),
    device: str = typer.Option("cpu", help="cpu | cuda: where the encoder runs, for --target python-torch (cuda: the model in fp32, fp16 or bf16 with CUDA graphs per bucket and batch size, KIND_GPU; the build and its gate run on the GPU host) and --target onnxruntime. Default cpu."),
    ort_device: Optional[str] = typer.Option(None, help="cpu | gpu: --device for --target onnxruntime, under its older name (gpu is cuda). Default: --device."),
    cuda_graphs: bool = typer.Option(True, "--cuda-graphs/--no-cuda-graphs", help="python-torch --device cuda: capture a CUDA graph per (bucket, batch size) at load and pad each run to the nearest one. Default on."),
    ort_trt_fp16: bool = typer.Option(False, help="onnxruntime target on GPU: add the TensorRT execution accelerator in FP16. Default off."),
    fp32_layers: bool = typer.Option(False, help="tensorrt fp16/bf16 and onnxruntime fp16: AutoCast also keeps LayerNorm, Softmax and reductions in fp32 (the pooling head always is). Default off."),
    builder_opt_level: int = typer.Option(3, help="tensorrt builder optimization level 0..5. Default 3."),
    calibration_file: Optional[Path] = typer.Option(None, help="tensorrt reduced precision and onnxruntime fp16: real texts (one per line, or a JSON list) for AutoCast's range check and Q/DQ calibration, per bucket. Default: the bundled corpus."),
    corpus: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="Real texts for the parity gate (JSON list or one per line). Default: the bundled sample."),
    run_overhead_tokens: Optional[int] = typer.Option(None, help="Fixed cost of one encoder run, in tokens, that the front door weighs against padding when it cuts a mixed-length batch into chunks. Default 8 (docs/bench.md); never timed at build time, so builds are reproducible: `embtrt tune` measures the serving host's (knob front.run_overhead_tokens)."),
    trust_remote_code: bool = typer.Option(False, help="Allow the model folder's own Python code (an auto_map in config.json or tokenizer_config.json naming classes transformers lacks); such a folder is refused without this. python-torch serves it with the same trust. Default off."),
    fuse_attention: bool = typer.Option(True, "--fuse-attention/--no-fuse-attention", help="Models of 4096+ tokens on python-ort / onnxruntime (CPU) at fp32, BERT-family: serve ONNX Runtime's fused Attention (about 3x faster and 2.5x less memory per 16K-token text on CPU), gated as served; --no-fuse-attention serves the export as it is. Default on."),
    bundle_deps: bool = typer.Option(True, "--bundle-deps/--no-bundle-deps", help="Put the wheels the Python-backend models import (tokenizers; the encoder runtime for python-ort / python-openvino) into the repository, so a stock tritonserver loads it. Default on."),
    server_python: Optional[str] = typer.Option(None, help="Python version of the serving tritonserver's Python backend, for the bundled wheels, e.g. 3.12 for current NGC images. Default: this interpreter's version."),
    allow_mismatch: bool = typer.Option(False, help="Keep encoders that fail the quality gate (recorded in embtrt.json). Default off."),
    force: bool = typer.Option(False, help="Replace --out when it exists. Default off."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON on stdout; progress goes to stderr. Default off."),
) -> None:
    """Build a Triton model repository from an embedding model, cross-encoder (reranker) or sparse encoder (SPLADE) folder."""
    options = dict(ctx.params)  # named as spec_from_options' options; every one goes into the spec but these
    options["out"] = options.pop("out_dir")
    corpus, as_json = options.pop("corpus"), options.pop("as_json")
    require_extra("build", "build", "torch", "transformers", "sentence_transformers", "onnx", "onnxruntime")
    from ..export import build as run_build
    from ..export.spec_options import spec_from_options

    spec = spec_from_options(**options)  # checks --out, --name, --buckets, ... before it reads the model
    result = run_build(spec, force=force, corpus=corpus, log=progress_log(as_json))
    if as_json:
        sys.stdout.write(json.dumps(result.manifest, indent=2, default=str) + "\n")
    elif result.pending:
        out.print(f"[yellow]pending:[/] {len(result.pending)} TensorRT plans; run `embtrt engines {escape(str(result.repository))}` on the GPU host")
