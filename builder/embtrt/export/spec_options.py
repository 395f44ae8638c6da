"""The CLI's options -> a BuildSpec (`spec_from_options`): the model folder read for what it is
(its kind, the reference's pooling, prompts, max length), the target resolved, the defaults chosen;
BuildSpec itself (export.spec) validates the result."""

from __future__ import annotations

import re
from pathlib import Path

from embtrt_backend.kinds import kind_of

from ..common.files import check_out
from ..common.gpu import tensorrt_available
from ..common.plugins import implementation
from ..common.options import parse_int_list
from ..errors import SpecError
from ..reference.modelinfo import POOLINGS
from ..reference.modelinfo import default_buckets, default_model_path, inspect_model, read_st_prompts
from ..repository.bundle_record import parse_python
from ..repository.manifest import KINDS
from .spec import TARGETS, BuildSpec, a_or_an, field_error, default_preferred

def sanitize_name(raw: str) -> str:
    """A safe Triton model name from a folder name: [A-Za-z0-9_-], starting with a letter."""
    s = re.sub(r"[^A-Za-z0-9_\-]+", "_", raw).strip("_-").lower()
    if not s or not s[0].isalpha():
        s = "m_" + s
    return s[:48]


def resolve_target(target: str) -> str:
    """auto -> tensorrt when CUDA and TensorRT import, else python-ort."""
    if target != "auto":
        return target
    ok, _ = tensorrt_available()
    return "tensorrt" if ok else "python-ort"


def spec_from_options(
    model_dir: Path | None = None,
    out: Path = Path("repo"),
    *,
    name: str | None = None,
    target: str = "auto",
    pooling: str = "auto",
    normalize: bool | None = None,
    buckets: str | None = None,
    max_seq_length: int | None = None,
    max_batch_size: int = 32,
    preferred_batch_sizes: str | None = None,
    pooler: str | None = None,
    prompt: tuple[str, ...] | list[str] | None = None,
    default_prompt: str | None = None,
    dimensions: str | None = None,
    force: bool | None = None,
    kind: str = "auto",
    **rest: object,
) -> BuildSpec:
    """The spec of `embtrt build`'s options, named as the command's parameters (every BuildSpec
    field not named here passes through as given). None leaves a value to the model folder.

    The folder's kind is read first from its config files (cheap: nothing is loaded; a folder that runs its own
    code, or a vision-language model no rule serves, is refused here), so that `--target auto` takes a kind's own
    target (a page-image retriever's python-torch) before the options are checked against one. Then what the user
    gave is validated, before the model is loaded (seconds to minutes): --out (when `force` is given, as the CLI
    does), --name, --target, --precision, --buckets and every other field, by the BuildSpec rules themselves on a
    provisional spec whose model-given values are ones no rule refuses. Then the model fills in the rest and the
    whole spec is validated again."""
    bundled = model_dir is None
    model_dir = default_model_path() if model_dir is None else Path(model_dir).resolve()
    if force is not None:
        check_out(Path(out), force)
    if target not in ("auto", *TARGETS):
        raise field_error("target", target, "auto, " + ", ".join(TARGETS))
    if kind not in ("auto", *KINDS):
        raise field_error("kind", kind, "auto, " + ", ".join(KINDS))
    if pooling not in ("auto", *POOLINGS):
        raise field_error("pooling", pooling, "auto, " + ", ".join(POOLINGS))
    bucket_t = parse_int_list("buckets", buckets)
    pref = parse_int_list("preferred_batch_sizes", preferred_batch_sizes) or default_preferred(max_batch_size)
    widths = parse_int_list("dimensions", dimensions)
    overrides: dict[str, str] = {}
    for item in (prompt or ()):
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise field_error("prompt", item, "NAME=TEXT, e.g. --prompt 'query=query: '")
        overrides[key] = text
    default_name = None if default_prompt is None or default_prompt.lower() == "none" else default_prompt
    ort_device = rest.pop("ort_device", None)
    if ort_device is not None:   # --ort-device, the older name of --device for --target onnxruntime
        if ort_device not in ("cpu", "gpu"):
            raise field_error("ort_device", ort_device, "cpu, gpu (the same as --device cpu, cuda)")
        alias = "cuda" if ort_device == "gpu" else "cpu"
        if rest.get("device", "cpu") not in ("cpu", alias):
            raise field_error("ort_device", ort_device, f"the same device as --device {rest['device']} (or leave it out)")
        rest["device"] = alias
    if rest.get("run_overhead_tokens") is None:
        rest.pop("run_overhead_tokens", None)   # the documented default (the CLI's None)
    in_graph = bool(rest.pop("active_dims_in_graph", False))   # checked once the folder says its kind and K
    # a preset's name or JSON: resolved on the folder's default (a causal-LM reranker's) below
    template_given = str(rest.pop("pair_template", None) or "") or None
    given_instruction = rest.pop("instruction", None)
    instruction = None if given_instruction is None else str(given_instruction)
    rest["server_python"] = parse_python(rest.get("server_python"))  # type: ignore[arg-type]  # default: this Python
    if name is None:
        name = "all_minilm_l6_v2" if bundled else sanitize_name(model_dir.name)
    # Provisional: the model's max length, width and prompts are not known yet. Without --max-seq-length
    # the largest bucket stands in for it (the build fails unless they are equal), and the stride, which
    # is checked against it, waits for the model.
    seq = max_seq_length if max_seq_length is not None else max(*bucket_t, 2) if bucket_t else 1 << 20
    stride = {} if max_seq_length is not None else {"overflow_stride": 0}
    names = {**overrides, **({default_name: ""} if default_name and default_name not in overrides else {})}
    from ..reference.detect import detect
    from ..reference.modelinfo import require_trusted

    require_trusted(model_dir, bool(rest.get("trust_remote_code", False)))
    detection = detect(model_dir)
    found, why = detection.kind.name, detection.why
    if kind != "auto" and detection.admits(kind):
        found = kind   # a *ForSequenceClassification folder as a reranker or a classifier, bge-m3 as an embedder
    resolved, own = resolve_target(target), kind_of(found).targets
    if target == "auto" and own and resolved not in own:   # a kind that builds for some targets only: its own, before
        resolved = own[0]                                   # --precision and the rest are checked against a target
    given = BuildSpec(
        model_dir=model_dir, out=Path(out), name=name, target=resolved,
        pooling="mean" if pooling == "auto" else pooling, normalize=bool(normalize), buckets=bucket_t or default_buckets(seq),
        max_seq_length=seq, hidden_size=1 << 30, max_batch_size=max_batch_size, preferred_batch_sizes=pref,
        pooler=pooler or "fused", prompts=tuple(names.items()), default_prompt_name=default_name, dimensions=widths,
        **{**rest, **stride},  # type: ignore[arg-type]
    )

    if kind != "auto" and kind != found:
        raise SpecError(f"invalid kind: --kind {kind}, but {model_dir.name} is {a_or_an(found)} {found} ({why})",
                        f"build it as {a_or_an(found)} {found} (leave --kind out), or point at {a_or_an(kind)} {kind} folder")
    if kind_of(found).spec_fields:   # what the kind's reference reads of the folder (its export module)
        fields = implementation(kind_of(found), "spec_fields")(model_dir, max_seq_length, bucket_t, given.trust_remote_code,
                                                               overrides, default_prompt, default_name)
        if template_given or instruction is not None:
            fields["pair_template"] = _pair_template(template_given, instruction, fields.get("pair_template", ""))
        return given.with_(**fields, active_dims_in_graph=in_graph)
    if template_given or instruction is not None:
        raise field_error("pair_template" if template_given else "instruction", template_given or instruction,
                          f"a reranker's option (an LLM-style one); this model is {a_or_an(found)} {found}")
    info = inspect_model(model_dir, trust_remote_code=given.trust_remote_code)
    if pooling == "auto":
        pooling = info.pooling or ("last-token" if info.is_decoder else "cls")
    if normalize is None:
        normalize = info.normalize if info.normalize is not None else True
    if max_seq_length is None:
        max_seq_length = info.max_seq_length or 512
    if info.max_position_embeddings and max_seq_length > info.max_position_embeddings:
        raise field_error(
            "max_seq_length", max_seq_length,
            f"at most max_position_embeddings ({info.max_position_embeddings})",
        )
    prompts, model_default, include_prompt = (read_st_prompts(model_dir, given.trust_remote_code) if info.is_sentence_transformers
                                              else ({}, None, True))
    prompts.update(overrides)
    if default_prompt is not None:
        model_default = default_name
    if pooler is None and not include_prompt and any(prompts.values()):
        pooler = "python"   # prompt tokens are left out of pooling: pool outside the graph
    return given.with_(
        pooling=pooling,
        normalize=bool(normalize),
        buckets=bucket_t or default_buckets(max_seq_length),
        max_seq_length=int(max_seq_length),
        hidden_size=info.hidden_size,
        input_names=info.input_names,
        is_decoder=info.is_decoder,
        pooler=pooler or "fused",
        prompts=tuple(prompts.items()),
        default_prompt_name=model_default,
        include_prompt=include_prompt,
        overflow_stride=rest.get("overflow_stride", BuildSpec.overflow_stride),
        active_dims_in_graph=in_graph,
    )


def _pair_template(given: str | None, instruction: str | None, default_json: str) -> str:
    """--pair-template / --instruction over the folder's default template -> the spec's JSON."""
    from embtrt_backend.pair_template import PairTemplate, resolve

    try:
        template = resolve(given, instruction, PairTemplate.from_json(default_json))
    except ValueError as exc:
        raise field_error("pair_template" if given else "instruction", given or instruction, str(exc)) from exc
    return template.to_json() if template is not None else ""
