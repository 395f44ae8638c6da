"""BuildSpec: the one frozen, validated object that travels from the CLI to the renderer."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from embtrt_backend.kinds import SPARSE_WEIGHTS, kind_of

from ..errors import SpecError
from ..repository.budget import RUN_OVERHEAD_TOKENS, bucket_batch
from ..reference.modelinfo import POOLINGS
from ..repository.bundle_record import parse_python
from ..repository.gate import Gate
from ..repository.manifest import KINDS  # the kinds a repository may hold: one list

TARGETS = ("python-ort", "python-openvino", "python-torch", "onnxruntime", "tensorrt")
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp8")
POOLER_PLACES = ("fused", "python")
OVERFLOW = ("truncate", "reject", "chunk")
DEVICES = ("cpu", "cuda")
DEVICE_TARGETS = ("python-torch", "onnxruntime")   # the targets that run on either device
ROUTER_ENCODERS = ("auto", "local", "bls")
LOCAL_TARGETS = ("python-ort", "python-openvino", "python-torch")

# Which precisions each target can build, for every kind of model (int8 for python-ort/onnxruntime
# is ORT dynamic quantization; reduced precision ships only behind the kind's gate).
TARGET_PRECISIONS = {
    "python-ort": ("fp32", "int8"),
    "python-openvino": ("fp32", "bf16"),
    "python-torch": ("fp32", "bf16"),
    "onnxruntime": ("fp32", "fp16", "int8"),
    "tensorrt": PRECISIONS,
}

# python-torch on CUDA casts the model's weights (no autocast): fp16 too.
CUDA_TORCH_PRECISIONS = ("fp32", "fp16", "bf16")

# From this max sequence length on, ONNX Runtime sessions run without the memory arena.
LONG_INPUT = 4096

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$")


def field_error(fieldname: str, value: object, allowed: str) -> SpecError:
    return SpecError(f"invalid {fieldname}: {value!r}", f"allowed: {allowed}")


@dataclass(frozen=True)
class BuildSpec:
    model_dir: Path
    out: Path
    name: str
    target: str = "python-ort"
    pooling: str = "mean"
    normalize: bool = True
    buckets: tuple[int, ...] = (32, 128, 256)
    max_seq_length: int = 256
    hidden_size: int = 384
    input_names: tuple[str, ...] = ("input_ids", "attention_mask")
    is_decoder: bool = False
    max_batch_size: int = 32
    # Rows x bucket length per encoder run: each bucket's max batch is min(max_batch_size,
    # max_batch_tokens // bucket), so long buckets batch few rows and memory per run stays bounded.
    max_batch_tokens: int = 16384
    # 0: a batch is formed as soon as an instance is free, from whatever is queued (the queue policy every
    # config carries makes Triton wait for a free instance first), so a lone request never waits and batches
    # fill while the instances are busy. The seed's 2000 made every lone request wait 2 ms (docs/performance.md).
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = (8, 16, 32)
    instances: int = 1
    # Instances of each bucket's encoder model; None = auto (see encoder_count).
    encoder_instances: int | None = None
    # Front-door instance count; None = auto (see front_instances).
    front_door_instances: int | None = None
    precision: str = "fp32"
    pooler: str = "fused"
    overflow: str = "truncate"
    # --overflow chunk: consecutive max-length windows overlap by this many tokens.
    overflow_stride: int = 32
    device: str = "cpu"          # where the encoder runs: python-torch and onnxruntime (--ort-device gpu is cuda)
    cuda_graphs: bool = True     # python-torch on cuda: CUDA graphs per (bucket, batch size), rows padded to the bucket
    ort_threads: int = 0
    ort_spinning: bool = False
    # the front door's own per-stage timers (embtrt_backend.stages), exported as Triton custom metrics
    stage_timers: bool = False
    router_encoder: str = "auto"
    ort_trt_fp16: bool = False
    fp32_layers: bool = False
    builder_opt_level: int = 3
    calibration_file: Path | None = None
    max_queue_size: int = 256
    queue_timeout_us: int = 30_000_000
    trust_remote_code: bool = False
    allow_mismatch: bool = False
    # Fixed cost of one encoder run, in tokens of compute, for padding-aware chunking in the
    # front door: one documented default (repository.budget.RUN_OVERHEAD_TOKENS), never a build-time timing;
    # `embtrt tune` measures the serving host's.
    run_overhead_tokens: int = RUN_OVERHEAD_TOKENS
    opset: int = 17
    # The repository carries the wheels its Python models import, built for this server Python.
    bundle_deps: bool = True
    # Long models (max_seq_length >= LONG_INPUT) on ONNX Runtime targets at fp32: serve ONNX Runtime's fused
    # attention (export/fuse.py); off: the export as it is.
    fuse_attention: bool = True
    server_python: str = field(default_factory=lambda: f"{sys.version_info.major}.{sys.version_info.minor}")
    gate: Gate = field(default_factory=Gate)
    # Request options (config_sentence_transformers.json / the Pooling config, or --prompt,
    # --default-prompt, --dimensions): the prompts a request may pick, the one applied when it
    # picks none, whether prompt tokens are pooled, and the Matryoshka widths (None: any).
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt_name: str | None = None
    include_prompt: bool = True
    dimensions: tuple[int, ...] | None = None
    # an LLM-style reranker's prompt template (embtrt_backend.pair_template, as JSON; "" none): a causal-LM
    # reranker's default, or --pair-template / --instruction
    pair_template: str = ""
    # the kind of model (docs/rerankers.md): a reranker's classifier labels and default activation
    kind: str = kind_of(None).name   # the registry's default kind
    num_labels: int = 0
    activation: str = "identity"      # reranker: sigmoid | identity; sparse: relu | log1p_relu
    splade_pooling: str = "max"       # sparse: max | sum over the sequence
    sparse_encoder_dir: str = ""      # inference-free SPLADE: the document route's MLM folder in the model folder
    sparse_query_max_length: int = 0  # inference-free SPLADE: the static query side's max length (0: none)
    sparse_max_active_dims: int = 0   # sparse: the folder's max_active_dims, each vector's K largest by default (0: all)
    active_dims_in_graph: bool = False  # sparse: that top-K kept inside the ONNX graph (requests ask for at most K)
    # multi-vector: the front door's parameters the folder decides (layout, widths, lengths, expansion,
    # skiplist ids: kinds.multivector.reference.MultiVectorInfo.params)
    multivector: tuple[tuple[str, str], ...] = ()
    hf_subdir: str = ""               # the Hugging Face files' folder inside the model folder (an old CLIPModel module's)

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise field_error("name", self.name, "a letter, then up to 63 letters, digits, '_' or '-'")
        for f, choices in (("target", TARGETS), ("pooling", POOLINGS), ("precision", PRECISIONS), ("pooler", POOLER_PLACES),
                           ("overflow", OVERFLOW), ("router_encoder", ROUTER_ENCODERS), ("device", DEVICES)):
            if getattr(self, f) not in choices:
                raise field_error(f, getattr(self, f), ", ".join(choices))
        allowed = CUDA_TORCH_PRECISIONS if (self.target, self.device) == ("python-torch", "cuda") \
            else TARGET_PRECISIONS[self.target]
        if self.precision not in allowed:
            where = f"target {self.target}" + (" on --device cuda" if allowed is CUDA_TORCH_PRECISIONS else "")
            hint = " (fp16: --device cuda)" if (self.target, self.precision) == ("python-torch", "fp16") else ""
            raise field_error("precision", self.precision, f"{', '.join(allowed)} for {where}{hint}")
        if self.calibration_file is not None and not Path(self.calibration_file).is_file():
            raise field_error("calibration_file", str(self.calibration_file), "a readable file of real texts, one per line")
        if not 0 <= self.overflow_stride <= self.max_seq_length // 2:
            raise field_error("overflow_stride", self.overflow_stride, f"0 .. {self.max_seq_length // 2} (half the max sequence length)")
        if self.router_encoder == "local" and self.target not in LOCAL_TARGETS:
            raise field_error("router_encoder", self.router_encoder, f"auto or bls for target {self.target}")
        if self.device == "cuda" and self.target not in DEVICE_TARGETS:
            raise field_error("device", self.device, f"cpu for target {self.target} (cuda: {', '.join(DEVICE_TARGETS)}; "
                        "tensorrt always runs on the GPU)")
        if self.max_seq_length < 2:
            raise field_error("max_seq_length", self.max_seq_length, "an integer >= 2")
        b = self.buckets
        if not b or any(not isinstance(x, int) or x < 2 for x in b) or list(b) != sorted(set(b)):
            raise field_error("buckets", b, "strictly increasing integers >= 2, e.g. 32,128,256")
        if b[-1] != self.max_seq_length:
            raise field_error(
                "buckets", b,
                f"the largest bucket must equal the max sequence length {self.max_seq_length}",
            )
        for f, lo, hi, hint in (
                ("max_batch_size", 1, 4096, "1 .. 4096"),
                ("max_batch_tokens", 1, 1 << 24, "1 .. 16777216 (rows x bucket length per run)"),
                ("max_queue_delay_us", 0, 10_000_000, "0 .. 10000000"), ("instances", 1, 64, "1 .. 64"),
                ("encoder_instances", 1, 64, "1 .. 64 (or auto)"), ("front_door_instances", 1, 64, "1 .. 64 (or auto)"),
                ("ort_threads", 0, 256, "0 (ONNX Runtime's default) .. 256"), ("builder_opt_level", 0, 5, "0 .. 5"),
                ("run_overhead_tokens", 0, 100_000, f"0 .. 100000 (default {RUN_OVERHEAD_TOKENS})"),
                ("max_queue_size", 0, None, "0 (unbounded) or more"), ("queue_timeout_us", 0, None, "0 (none) or more")):
            v = getattr(self, f)   # None: auto (encoder_instances, front_door_instances)
            if v is not None and not (lo <= v and (hi is None or v <= hi)):
                raise field_error(f, v, hint)
        p = self.preferred_batch_sizes
        if not p or list(p) != sorted(set(p)) or p[0] < 1 or p[-1] > self.max_batch_size:
            raise field_error(
                "preferred_batch_sizes", p,
                f"strictly increasing integers in 1 .. max_batch_size ({self.max_batch_size})",
            )
        if parse_python(self.server_python) != self.server_python:
            raise field_error("server_python", self.server_python, "a CPython version such as 3.12")
        names = [n for n, _ in self.prompts]
        if len(set(names)) != len(names) or any(not NAME_RE.match(n) for n in names):
            raise field_error("prompts", names, "unique names: a letter, then letters, digits, '_' or '-'")
        if self.default_prompt_name is not None and self.default_prompt_name not in names:
            raise field_error("default_prompt_name", self.default_prompt_name,
                        ", ".join(names) + " or none" if names else "none (the model has no prompts)")
        if self.dimensions is not None and (not self.dimensions or list(self.dimensions) != sorted(set(self.dimensions))
                                            or self.dimensions[0] < 1 or self.dimensions[-1] > self.hidden_size):
            raise field_error("dimensions", self.dimensions, f"strictly increasing widths in 1 .. {self.hidden_size}")
        if not self.include_prompt and self.fused and any(t for _, t in self.prompts):
            raise field_error("pooler", self.pooler, "python: this model leaves prompt tokens out of pooling (include_prompt false), "
                        "which needs the hidden states outside the graph")
        if "input_ids" not in self.input_names or "attention_mask" not in self.input_names:
            raise field_error("input_names", self.input_names, "must contain input_ids and attention_mask")
        if self.kind not in KINDS:
            raise field_error("kind", self.kind, "auto, " + ", ".join(KINDS))
        sparse = kind_of(self.kind).has(SPARSE_WEIGHTS)
        if self.active_dims_in_graph and not (sparse and self.sparse_max_active_dims > 0):
            raise field_error("active_dims_in_graph", True, "a sparse encoder whose folder sets max_active_dims (the K the "
                        "graph keeps); this one " + ("sets none" if sparse else f"is {a_or_an(self.kind)} {self.kind}"))
        ranks_pairs = kind_of(self.kind).pairs and "rank" in kind_of(self.kind).operations
        if self.pair_template and not ranks_pairs:   # a prompt template scores (query, document) pairs: a reranker's
            raise field_error("pair_template", "given", f"a reranker (an LLM-style one); this model is {a_or_an(self.kind)} {self.kind}")
        if self.pair_template and self.prompts:
            raise field_error("prompts", [n for n, _ in self.prompts], "none beside a pair template (its instruction is the "
                        "request option; --instruction sets the default)")
        if self.overflow not in kind_of(self.kind).overflow:
            raise field_error("overflow", self.overflow, f"{' or '.join(kind_of(self.kind).overflow)} for a {self.kind} "
                        "(over-long input is cut as sentence-transformers cuts it, or refused per request)")

    @property
    def router_mode(self) -> str:
        """local: the front door runs the encoder itself (python-ort); bls: it calls each bucket's encoder."""
        if self.router_encoder == "auto":
            return "local" if self.target in LOCAL_TARGETS else "bls"
        return self.router_encoder

    @property
    def front_instances(self) -> int:
        """Front-door instances. Auto: 2 when the front door runs the encoder itself (local mode),
        else --instances. Measured with Triton 2.51 on 2 cores: with one instance the dynamic
        batcher sometimes leaves queued requests for its 500 ms idle wait (p99 ~530 ms at
        concurrency 32, 2-9% of requests); with two, none in 40 runs, and more throughput."""
        if self.front_door_instances is not None:
            return self.front_door_instances
        return max(2, self.instances) if self.router_mode == "local" else self.instances

    def bucket_max_batch(self, bucket: int) -> int:
        """Max rows per run for one bucket: the token budget, capped by max_batch_size."""
        return bucket_batch(self.max_batch_tokens, bucket, self.max_batch_size)

    def bucket_preferred(self, bucket: int) -> tuple[int, ...]:
        """The preferred batch sizes that fit the bucket's max batch (else the max batch alone)."""
        m = self.bucket_max_batch(bucket)
        return tuple(p for p in self.preferred_batch_sizes if p <= m) or (m,)

    @property
    def encoder_count(self) -> int:
        """Instances of each bucket's encoder model. Auto: 2 for the Python-backend encoders (the same
        Triton 2.51 batcher stall as the front door's: measured through `embtrt gateway`, which sends
        token ids to these models, one instance gave p99 5.1 s at concurrency 32 and 54 req/s; two
        gave p99 0.17 s and 263 req/s), else --instances."""
        if self.encoder_instances is not None:
            return self.encoder_instances
        return max(2, self.instances) if self.target in LOCAL_TARGETS else self.instances

    @property
    def prompt_map(self) -> dict[str, str]:
        return dict(self.prompts)

    @property
    def default_prompt(self) -> str:
        """The prompt text applied to a request that picks none ("" for none)."""
        return self.prompt_map.get(self.default_prompt_name, "") if self.default_prompt_name else ""

    @property
    def fused(self) -> bool:
        return self.pooler == "fused"

    @property
    def gpu(self) -> bool:
        """Does the encoder run on the GPU (tensorrt, or --device cuda)?"""
        return self.target == "tensorrt" or self.device == "cuda"

    @property
    def front_on_gpu(self) -> bool:
        """Does the front door itself run the encoder on the GPU (python-torch --device cuda, local)?
        Its instance group is then KIND_GPU."""
        return self.device == "cuda" and self.router_mode == "local"

    @property
    def pad_to_bucket(self) -> bool:
        """Fixed-shape encoders: TensorRT plans, and python-torch's CUDA graphs. Every row is padded to
        its bucket, so the front door's chunks are as large as allowed (no run overhead to weigh)."""
        return self.target == "tensorrt" or (self.target == "python-torch" and self.device == "cuda" and self.cuda_graphs)

    def graph_shapes(self, buckets: tuple[int, ...] | None = None) -> dict[int, tuple[int, ...]]:
        """python-torch on CUDA with graphs: the batch sizes captured per bucket (powers of two up to
        the bucket's max batch, and the max); {} where nothing is captured."""
        from embtrt_backend.torch_graphs import graph_batch_sizes

        if not (self.target == "python-torch" and self.device == "cuda" and self.cuda_graphs):
            return {}
        return {b: graph_batch_sizes(self.bucket_max_batch(b)) for b in (buckets or self.buckets)}

    def with_(self, **changes: object) -> "BuildSpec":
        return replace(self, **changes)  # type: ignore[arg-type]


def default_preferred(max_batch_size: int) -> tuple[int, ...]:
    """Up to three powers of two at the top of the range, ending at max_batch_size."""
    sizes = {max_batch_size}
    p = 1
    while p < max_batch_size:
        if p >= 4:
            sizes.add(p)
        p *= 2
    return tuple(sorted(sizes)[-3:])


def a_or_an(kind: str) -> str:
    """The article of a kind's name in messages ("an embedder"), from its registry label."""
    return kind_of(kind).label.split(" ", 1)[0] if kind in KINDS else "a"
