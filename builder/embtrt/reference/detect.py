"""What kind a model folder is: the registry's DETECTION rules (embtrt_backend.kinds), run in order;
the first that matches decides. Each rule is its kind's own test ("module:function" in the kind's
reference module) and says what it saw, matched or not, so that a build log and an error can say
why a folder is what it is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from embtrt_backend.kinds import DETECTION, Kind, Rule

from ..common.files import json_object
from ..common.plugins import resolve
from ..errors import SpecError


def st_model_type(path: Path) -> str:
    """config_sentence_transformers.json's model_type ("" where it has none)."""
    return str(json_object(Path(path) / "config_sentence_transformers.json").get("model_type") or "")


@dataclass(frozen=True)
class SequenceHead:
    """config.json's *ForSequenceClassification architecture: what the reranker's and the classifier's
    rules read."""
    architecture: str
    labels: int
    cross_encoder_mark: bool     # sbert_ce_default_activation_function: a CrossEncoder saved before sentence-transformers 4


def sequence_head(path: Path) -> SequenceHead | None:
    cfg = json_object(Path(path) / "config.json")
    archs = [a for a in cfg.get("architectures") or [] if isinstance(a, str) and a.endswith("ForSequenceClassification")]
    if not archs:
        return None
    labels = len(cfg.get("id2label") or {}) or int(cfg.get("num_labels") or 2)
    return SequenceHead(archs[0], labels, "sbert_ce_default_activation_function" in cfg)


@dataclass(frozen=True)
class Detection:
    kind: Kind
    why: str                                  # what the deciding rule saw
    rule: Rule
    passed: tuple[tuple[Rule, str], ...]      # the rules before it, each with why it did not match

    def admits(self, name: str) -> bool:
        """`--kind name` may serve this folder: the deciding rule's kind, or one it names in `also`."""
        return name == self.kind.name or any(k.name == name for k in self.rule.also)

    def explain(self) -> str:
        """One line for the build log: the kind, the rule's number and what it saw."""
        return f"{self.kind.name} (rule {DETECTION.index(self.rule) + 1} of {len(DETECTION)}: {self.why})"


def one_sequence_vlm(path: Path) -> str:
    """What makes `path` a vision-language model that reads image tokens in one sequence with its text ("" where it
    is not): a retrieval wrapper's `vlm_config` (ColPali, ColQwen2) or an image token of the model's vocabulary
    (Qwen-VL, PaliGemma, LLaVA). A CLIP-style two-tower model has neither."""
    cfg = json_object(Path(path) / "config.json")
    archs = ", ".join(a for a in cfg.get("architectures") or [] if isinstance(a, str)) or str(cfg.get("model_type") or "?")
    if isinstance(cfg.get("vlm_config"), dict):
        return f"config.json names {archs} over a vision-language model (vlm_config)"
    token = next((k for k in ("image_token_id", "image_token_index") if k in cfg), None)
    return f"config.json names {archs}, whose text carries image tokens ({token})" if token else ""


def detect(path: Path) -> Detection:
    """The kind of the model folder at `path`: the first rule that matches (the last rule matches
    every folder). A vision-language model of one sequence is only what a rule for such models decides (Rule.vlm: the
    page-image retriever's); one that another rule would match (its sentence-transformers files say
    MultiVectorEncoder or a text-and-image Transformer, or its architecture reads as an encoder) is refused, as
    serving its text side alone, or it as two towers, would not be its output."""
    path = Path(path)
    vlm = one_sequence_vlm(path)
    passed: list[tuple[Rule, str]] = []
    for rule in DETECTION:
        matched, why = resolve(rule.test)(path)
        if matched and vlm and not rule.vlm:
            raise SpecError(f"{path} is a vision-language model that reads images in one sequence with its text ({vlm}): "
                            "of these, ColPaliForRetrieval and ColQwen2ForRetrieval folders (page-image retrieval) and "
                            "Qwen3-VL embedders with sentence-transformers' last-token pooling are served; serving its text "
                            "side alone as a text kind would not be its output",
                            "CLIP-style two-tower models (separate text and image towers) build as the text-and-image kind "
                            "(docs/images.md)")
        if matched:
            return Detection(rule.kind, why, rule, tuple(passed))
        passed.append((rule, why))
    raise AssertionError("the registry's last detection rule matches every folder")   # pragma: no cover


def rules_help() -> str:
    """The rules in order, for --kind's help."""
    return "; ".join(f"{i}. {r.kind.name}: {r.says}" for i, r in enumerate(DETECTION, 1))
