"""PyTorch encoder for the python-torch target: on the CPU fp32, or bf16 autocast (AMX on recent
Xeons); on CUDA (`device` cuda) the model in fp32, fp16 or bf16 with CUDA graphs per (bucket,
batch size) (embtrt_backend.torch_graphs).

One class per kind of model, each running the Hugging Face folder `hf_dir` as the ONNX graph of
the other targets would: the embedder's last hidden states (pooled when fused), a reranker's
classifier logits [rows, labels], a sparse encoder's SPLADE weights [rows, vocab] (MLM logits,
masked, log1p(relu) (twice for log1p_relu), max or sum over the sequence, with a graph top-K
when the front door was built with --active-dims-in-graph). Outputs are float32.

On CUDA the whole forward, pooling and normalisation included, runs on the device (one small
fp32 tensor per row comes back), the model's weights cast to the precision (as
`SentenceTransformer.half()` does; fp32 keeps TF32 off, PyTorch's default for matmuls).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from .kinds import KINDS, kind_of
from .pooling import pool_and_normalize
from .torch_graphs import GraphSet, format_graph_shapes, parse_graph_shapes


DEVICE_PRECISIONS = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "fp16", "bf16")}
REPORT_EVERY = 1000   # static shapes: a count line in the server log after 1, 10, 100 and every this many runs


class _Torch:
    """What every kind shares: the device and precision, the thread count, the run (CPU autocast;
    CUDA graphs where captured, eager otherwise)."""

    auto_class = "AutoModel"

    @classmethod
    def from_params(cls, p: dict[str, str], hf_dir: str, threads: int, trust_remote_code: bool, device: str) -> "_Torch":
        """The encoder a front door's (or bucket encoder's) parameters describe."""
        return cls(hf_dir, p["precision"], threads, trust_remote_code, device)

    def __init__(self, hf_dir: str, precision: str, intra_threads: int, trust_remote_code: bool = False,
                 device: str = "cpu") -> None:
        import torch
        import transformers

        if precision not in DEVICE_PRECISIONS.get(device, ()):
            raise ValueError(f"python-torch on {device} runs {' or '.join(DEVICE_PRECISIONS.get(device, ('nothing',)))}, "
                             f"not {precision}")
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("this model was built for --device cuda, and PyTorch sees no CUDA device here "
                               f"(torch {torch.__version__}, CUDA build {torch.version.cuda})")
        # 0 = every core: the stub's environment sets OMP_NUM_THREADS=1, which torch would follow.
        torch.set_num_threads(intra_threads if intra_threads > 0 else (os.cpu_count() or 1))
        self.torch, self.device = torch, device
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32) if device == "cuda" \
            else torch.float32
        self.model = getattr(transformers, self.auto_class).from_pretrained(
            hf_dir, dtype=torch.float32, trust_remote_code=trust_remote_code).eval().to(device=device, dtype=dtype)
        self.autocast_bf16 = device == "cpu" and precision == "bf16"
        self.graphs = None
        self.more_graphs: list = []   # further static-shape sets (a page-image retriever's pages), tried in turn

    def forward(self, inputs: dict):
        """inputs (tensors on the device) -> the float32 output tensor on the device."""
        raise NotImplementedError

    def capture(self, shapes: dict[int, tuple[int, ...]], input_names: tuple[str, ...], capture: bool | None = None,
                extra: dict[str, tuple[int, ...]] | None = None, fill: dict | None = None) -> None:
        """Static shapes for these (bucket: batch sizes): CUDA graphs on CUDA, the eager stand-in on
        the CPU (capture=False); every shape warmed up before this returns. `extra`: float inputs of a fixed
        shape per row (a page's pixel_values): a further set beside the first, for the runs that feed them; `fill`: the
        values its warm-up runs on (a page's sequence, whose image tokens the model counts)."""
        def forward(inputs):
            with self.torch.inference_mode(), self.torch.autocast("cpu", dtype=self.torch.bfloat16,
                                                                  enabled=self.autocast_bf16):
                return self.forward(inputs)

        capture = self.device == "cuda" if capture is None else capture
        made = GraphSet(self.torch, forward, shapes, tuple(input_names), self.device, capture, extra, fill)
        if self.graphs is None:
            self.graphs = made
        else:
            self.more_graphs.append(made)
        print(f"embtrt python-torch: {len(made.graphs)} static shapes ready on {self.device} "
              f"({'CUDA graphs, captured and replayed once' if capture else 'eager stand-in without CUDA'}): "
              f"{format_graph_shapes(made.shapes)}" + (f" with {', '.join(extra)}" if extra else ""),
              file=sys.stderr, flush=True)

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        torch = self.torch
        if self.graphs is not None:
            out = self.graphs.run(feeds)
            for more in self.more_graphs if out is None else ():
                out = more.run(feeds)
                if out is not None:
                    break
            runs = self.graphs.replays + self.graphs.eager   # every run meets the first set
            replays = self.graphs.replays + sum(g.replays for g in self.more_graphs)
            if runs in (1, 10, 100) or runs % REPORT_EVERY == 0:   # evidence in the server log that the static shapes serve
                print(f"embtrt python-torch: {runs} runs, {replays} on static shapes, {runs - replays} eager",
                      file=sys.stderr, flush=True)
            if out is not None:
                return out
        inputs = {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device) for k, v in feeds.items()}
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast_bf16):
            return self.forward(inputs).cpu().numpy()


def torch_pool(torch, hidden, mask, mode: str, normalize: bool):
    """embtrt_backend.pooling.pool_and_normalize in torch, on the device: hidden [B, S, H] (any
    float dtype) and mask [B, S] -> [B, H] float32."""
    h = hidden.float()
    rows = torch.arange(h.shape[0], device=h.device)
    if mode == "cls":   # the first attended position
        out = h[rows, (mask != 0).to(torch.int64).argmax(dim=1)]
    elif mode == "mean":
        m = mask.to(torch.float32).unsqueeze(-1)
        out = (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
    elif mode == "last-token":   # the last attended position, left or right padding
        pos = torch.arange(mask.shape[1], device=h.device).unsqueeze(0)
        out = h[rows, (mask.to(torch.int64) * pos).argmax(dim=1)]
    else:
        raise ValueError(f"unknown pooling {mode!r}")
    return torch.nn.functional.normalize(out, p=2, dim=1, eps=1e-12) if normalize else out


class TorchEncoder(_Torch):
    """An embedder: pooled vectors when `fused`, else the last hidden states (float32) for a
    separate pooler."""

    def __init__(self, hf_dir: str, precision: str, intra_threads: int, pooling: str, normalize: bool,
                 fused: bool, trust_remote_code: bool = False, device: str = "cpu") -> None:
        super().__init__(hf_dir, precision, intra_threads, trust_remote_code, device)
        self.pooling, self.normalize, self.fused = pooling, normalize, fused

    @classmethod
    def from_params(cls, p, hf_dir, threads, trust_remote_code, device):
        return cls(hf_dir, p["precision"], threads, p["pooling"], p["normalize"] == "true", p["pooler"] == "fused",
                   trust_remote_code, device)

    def forward(self, inputs: dict):
        hidden = self.model(**inputs).last_hidden_state
        if not self.fused:
            return hidden.float()
        if self.device == "cpu":   # numpy's pooling, as before (the CPU targets' reference)
            return self.torch.from_numpy(pool_and_normalize(hidden.float().numpy(), inputs["attention_mask"].numpy(),
                                                            self.pooling, self.normalize))
        return torch_pool(self.torch, hidden, inputs["attention_mask"], self.pooling, self.normalize)


class TorchClassifier(_Torch):
    """A reranker: the *ForSequenceClassification model's logits, float32 [rows, labels]; an LLM-style
    one's (`score_tokens`: its "yes" and "no" ids) TorchYesNo."""

    auto_class = "AutoModelForSequenceClassification"

    @classmethod
    def from_params(cls, p: dict[str, str], hf_dir: str, threads: int, trust_remote_code: bool, device: str) -> "_Torch":
        if p.get("score_tokens"):
            enc = TorchYesNo(hf_dir, p["precision"], threads, trust_remote_code, device)
            enc.true_id, enc.false_id = (int(x) for x in p["score_tokens"].split(","))
            return enc
        return cls(hf_dir, p["precision"], threads, trust_remote_code, device)

    def forward(self, inputs: dict):
        return self.model(**inputs).logits.float()


class TorchYesNo(_Torch):
    """An LLM-style reranker's causal LM: at each row's last real token (right padding), the logit of "yes"
    less that of "no" (sentence-transformers' LogitScore), float32 [rows, 1]; only that position's logits
    are computed."""

    auto_class = "AutoModelForCausalLM"
    true_id = false_id = 0

    def forward(self, inputs: dict):
        torch = self.torch
        mask = inputs["attention_mask"]
        hidden = self.model.get_decoder()(**inputs).last_hidden_state
        last = (torch.arange(mask.shape[1], device=mask.device).unsqueeze(0) * mask).argmax(dim=1)
        logits = self.model.get_output_embeddings()(hidden[torch.arange(hidden.shape[0], device=hidden.device), last])
        return (logits[:, self.true_id] - logits[:, self.false_id]).float().unsqueeze(1)


def splade_weights(torch, logits, attention_mask, pooling: str, double: bool, top_k: int = 0):
    """SPLADE pooling of masked-LM logits [rows, length, vocab] -> weights [rows, vocab]: masked,
    log1p(relu) (twice for log1p_relu), max or sum over the sequence, then (top_k) each row's K
    largest kept, the rest 0. The ONNX export (embtrt.kinds.sparse.export) traces this same function."""
    x = torch.log1p(torch.relu(logits * attention_mask.unsqueeze(-1).to(torch.float32)))
    if double:
        x = torch.log1p(x)
    x = x.max(dim=1).values if pooling == "max" else x.sum(dim=1)
    if top_k:   # TopK + ScatterElements in the graph
        vals, idx = torch.topk(x, top_k, dim=1)
        x = torch.zeros_like(x).scatter(1, idx, vals)
    return x


class TorchSplade(_Torch):
    """A SPLADE encoder: the masked-LM head's logits pooled into one weight per vocabulary entry."""

    auto_class = "AutoModelForMaskedLM"

    def __init__(self, hf_dir: str, precision: str, intra_threads: int, pooling: str, activation: str,
                 top_k: int = 0, trust_remote_code: bool = False, device: str = "cpu") -> None:
        if pooling not in ("max", "sum") or activation not in ("relu", "log1p_relu"):
            raise ValueError(f"SPLADE pooling {pooling!r} / activation {activation!r}: must be max or sum / "
                             "relu or log1p_relu")
        super().__init__(hf_dir, precision, intra_threads, trust_remote_code, device)
        self.pooling, self.double, self.top_k = pooling, activation == "log1p_relu", top_k

    @classmethod
    def from_params(cls, p, hf_dir, threads, trust_remote_code, device):
        return cls(hf_dir, p["precision"], threads, p["splade_pooling"], p["splade_activation"],
                   int(p.get("graph_max_active_dims") or 0), trust_remote_code, device)

    def forward(self, inputs: dict):
        logits = self.model(**inputs).logits.float()
        return splade_weights(self.torch, logits, inputs["attention_mask"], self.pooling, self.double, self.top_k)


HEADS_FILE = "embtrt_heads.npz"   # a multi-vector model's heads beside its graph (python-torch reads them)


def multivector_head(torch, hidden, heads: dict, layout: str, normalize: bool = True):
    """A multi-vector encoder's output per position from the last hidden states [rows, length, hidden]:
    colbert: the projection (heads `weight`, optional `bias`), L2-normalised where the model normalises
    -> [rows, length, dim]; m3 (bge-m3): [rows, length, C + 1], C = max(colbert dim, hidden), position 0
    the normalised CLS (the dense vector), the others the normalised ColBERT projection (`colbert_weight`,
    `colbert_bias`), the last column relu of the sparse head (`sparse_weight`, `sparse_bias`). The ONNX
    export (embtrt.kinds.multivector.export) traces this same function."""
    F = torch.nn.functional
    if layout == "colbert":
        v = F.linear(hidden, heads["weight"], heads.get("bias"))
        return F.normalize(v, p=2, dim=-1, eps=1e-12) if normalize else v
    dense = F.normalize(hidden[:, 0], p=2, dim=-1, eps=1e-12)
    col = F.normalize(F.linear(hidden, heads["colbert_weight"], heads["colbert_bias"]), p=2, dim=-1, eps=1e-12)
    sparse = torch.relu(F.linear(hidden, heads["sparse_weight"], heads["sparse_bias"]))
    c = max(dense.shape[-1], col.shape[-1])
    dense, col = F.pad(dense, (0, c - dense.shape[-1])), F.pad(col, (0, c - col.shape[-1]))
    return torch.cat([torch.cat([dense.unsqueeze(1), col[:, 1:]], dim=1), sparse], dim=-1)


def load_heads(torch, hf_dir: str, layout: str) -> dict:
    """A multi-vector model's heads as multivector_head names them: the served repository's
    embtrt_heads.npz beside 1/hf/, else (the build's gate) read from the model folder itself: bge-m3's
    colbert_linear.pt and sparse_linear.pt, or a MultiVectorEncoder's 1_Dense/model.safetensors."""
    served = os.path.join(os.path.dirname(os.path.abspath(hf_dir)), HEADS_FILE)
    if os.path.isfile(served):
        arrays = np.load(served)
        return {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    if layout == "m3":
        col, sp = (torch.load(os.path.join(hf_dir, f), map_location="cpu", weights_only=True)
                   for f in ("colbert_linear.pt", "sparse_linear.pt"))
        return {"colbert_weight": col["weight"], "colbert_bias": col["bias"], "sparse_weight": sp["weight"],
                "sparse_bias": sp["bias"]}
    import json

    from safetensors.torch import load_file

    modules = json.load(open(os.path.join(hf_dir, "modules.json"), encoding="utf-8"))
    dense = next(m["path"] for m in modules if m["type"].endswith("Dense"))
    state = load_file(os.path.join(hf_dir, dense, "model.safetensors"))
    return {"weight": state["linear.weight"], **({"bias": state["linear.bias"]} if "linear.bias" in state else {})}


class TorchMultiVector(_Torch):
    """A multi-vector encoder: the model's last hidden states through its heads (multivector_head),
    float32 [rows, length, width]."""

    def __init__(self, hf_dir: str, precision: str, intra_threads: int, layout: str, normalize: bool,
                 trust_remote_code: bool = False, device: str = "cpu") -> None:
        super().__init__(hf_dir, precision, intra_threads, trust_remote_code, device)
        self.heads = {k: v.float().to(self.device) for k, v in load_heads(self.torch, hf_dir, layout).items()}
        self.layout, self.normalize = layout, normalize

    @classmethod
    def from_params(cls, p, hf_dir, threads, trust_remote_code, device):
        return cls(hf_dir, p["precision"], threads, p["mv_layout"], p.get("mv_normalize", "true") == "true",
                   trust_remote_code, device)

    def forward(self, inputs: dict):
        hidden = self.model(**inputs).last_hidden_state.float()
        return multivector_head(self.torch, hidden, self.heads, self.layout, self.normalize).float()


def torch_class(name: str) -> type:
    """A kind's python-torch class (Kind.torch_encoder): a class of this module by name, or one a kind's own package
    brings ("kinds.pages.torch:TorchPages", relative to embtrt_backend)."""
    if ":" not in name:
        return globals()[name]
    from importlib import import_module

    module, attr = name.split(":")
    return getattr(import_module(f"{__package__}.{module}"), attr)


def torch_encoder(p: dict[str, str], hf_dir: str, threads: int, trust_remote_code: bool = False) -> _Torch:
    """The python-torch encoder of a model's parameters, by its kind, on its device; with static
    shapes (CUDA graphs on CUDA) where the parameters list them (`graph_shapes`) and `cuda_graphs`
    is not false."""
    device = p.get("device", "cpu")
    try:
        kind = kind_of(p.get("kind"))   # the kind's Kind names its class here (Kind.torch_encoder)
    except ValueError as exc:
        raise ValueError(f"{exc}: python-torch runs {', '.join(k.label for k in KINDS)}") from None
    enc: _Torch = torch_class(kind.torch_encoder).from_params(p, hf_dir, threads, trust_remote_code, device)
    if p.get("graph_shapes") and p.get("cuda_graphs", "true") == "true":
        enc.capture(parse_graph_shapes(p["graph_shapes"]), tuple(p["input_names"].split(",")))
        if p.get("image_graph_shapes"):   # a kind's image runs of one fixed shape (a ColPali page: "pixel_values:3,448,448")
            capture_images(enc, p)
    return enc


def capture_images(enc: _Torch, p: dict[str, str]) -> None:
    """The image runs' static shapes (`image_graph_shapes`, `image_graph_input`, `image_graph_ids`), captured with
    transformers' input checks off (they read a tensor on the host, which a capture forbids; the warm-up and capture run
    on the model's own page sequence); where the capture fails anyway, the image runs stay eager, said in the log."""
    name, _, tail = p["image_graph_input"].partition(":")
    before = os.environ.get("TRANSFORMERS_DISABLE_TORCH_CHECK")
    os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = "1"
    try:
        enc.capture(parse_graph_shapes(p["image_graph_shapes"]), tuple(p["input_names"].split(",")),
                    extra={name: tuple(int(x) for x in tail.split(","))},
                    fill={"input_ids": np.asarray([int(x) for x in p["image_graph_ids"].split(",")], np.int64)})
    except Exception as exc:  # noqa: BLE001 (the images run eagerly; the queries' static shapes stand)
        print(f"embtrt python-torch: the image runs' static shapes were not captured ({type(exc).__name__}: {exc}); "
              "image runs are eager", file=sys.stderr, flush=True)
    finally:
        if before is None:
            os.environ.pop("TRANSFORMERS_DISABLE_TORCH_CHECK", None)
        else:
            os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = before


class TorchClip(_Torch):
    """A text-and-image embedder (a CLIP-style model): the text tower's projected vector
    (`get_text_features(...).pooler_output`, as sentence-transformers reads it); `tower("image")` is the
    same model's image tower (`get_image_features(pixel_values).pooler_output`), sharing its weights."""

    def forward(self, inputs: dict):
        out = self.model.get_text_features(**inputs)
        return getattr(out, "pooler_output", out).float()   # transformers 5: an output object; 4: the tensor

    def tower(self, name: str):
        if name != "image":
            raise ValueError(f"a CLIP-style model has a text and an image tower, not {name!r}")
        return _ImageTower(self)


class _ImageTower:
    def __init__(self, clip: TorchClip) -> None:
        self.clip = clip

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        c = self.clip
        torch = c.torch
        pixels = torch.from_numpy(np.ascontiguousarray(feeds["pixel_values"])).to(c.device)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=c.autocast_bf16):
            out = c.model.get_image_features(pixel_values=pixels.to(next(c.model.parameters()).dtype))
            return getattr(out, "pooler_output", out).float().cpu().numpy()


TorchModel = _Torch   # the base a kind's own python-torch class extends (Kind.torch_encoder "module:Class")
