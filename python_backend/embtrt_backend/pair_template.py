"""An LLM-style reranker's prompt template (#71), one rule for the front door and the build: a pair is
scored as one sequence `prefix + middle + suffix`, where `middle` is the template's text with the
instruction, the query and the document put in, and only the middle is cut to the max length (the prefix
and the suffix, where the model reads its answer, are never cut). That is Qwen3-Reranker's model card
computation: its middle tokenized alone with the tokenizer's own special tokens, cut to max length less
the prefix and suffix tokens, then prefix + middle + suffix.

QWEN3_RERANKER is that card's template, and the default of a causal-LM reranker folder; a build may name
it for a sequence-classification conversion (`--pair-template qwen3-reranker`) or give a template of its
own as JSON (prefix, middle, suffix, instruction)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

FIELDS = ("instruction", "query", "document")


@dataclass(frozen=True)
class PairTemplate:
    prefix: str
    middle: str          # with {instruction}, {query} and {document}
    suffix: str
    instruction: str     # the default instruction (a request may give its own)

    def __post_init__(self) -> None:
        for name in ("{query}", "{document}"):
            if name not in self.middle:
                raise ValueError(f"the template's middle has no {name}")
        try:
            self.middle.format(instruction="", query="", document="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"the template's middle takes only {{instruction}}, {{query}} and {{document}} ({exc})") from exc

    def text(self, query: str, document: str, instruction: str | None = None) -> str:
        """The middle of one pair, with the request's instruction or the template's."""
        return self.middle.format(instruction=self.instruction if instruction is None else instruction,
                                  query=query, document=document)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> "PairTemplate | None":
        """The front door's `pair_template` parameter (empty: the model has none)."""
        if not text:
            return None
        doc = json.loads(text)
        return cls(str(doc["prefix"]), str(doc["middle"]), str(doc["suffix"]), str(doc.get("instruction", "")))


QWEN3_RERANKER = PairTemplate(
    prefix=("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
            "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"),
    middle="<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}",
    suffix="<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    instruction="Given a web search query, retrieve relevant passages that answer the query")

PRESETS = {"qwen3-reranker": QWEN3_RERANKER}


def build_options(template_json: str) -> list[str]:
    """The `embtrt build` options that give a template back (a build's rebuild command): a preset by its
    name (and its instruction where it differs), any other as its JSON."""
    from dataclasses import replace

    template = PairTemplate.from_json(template_json)
    if template is None:
        return []
    for name, preset in PRESETS.items():
        if replace(template, instruction=preset.instruction) == preset:
            same = template.instruction == preset.instruction
            return ["--pair-template", name] + ([] if same else ["--instruction", template.instruction])
    return ["--pair-template", template.to_json()]


def resolve(given: str | None, instruction: str | None, default: PairTemplate | None) -> PairTemplate | None:
    """A build's template: `given` (a preset's name, or JSON of prefix, middle, suffix and instruction: a file, or
    the text itself) or the model's default, with `instruction` as its default instruction. ValueError says
    what is wrong."""
    import os
    from dataclasses import replace

    template = default
    if given:
        if given in PRESETS:
            template = PRESETS[given]
        elif os.path.isfile(given) or given.lstrip().startswith("{"):
            try:
                if given.lstrip().startswith("{"):
                    doc = json.loads(given)
                else:
                    with open(given, encoding="utf-8") as f:
                        doc = json.load(f)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{given[:60]} is not JSON ({exc})") from exc
            missing = [k for k in ("prefix", "middle", "suffix") if not isinstance(doc.get(k), str)]
            if missing:
                raise ValueError(f"{given} has no string {', '.join(missing)}")
            template = PairTemplate(doc["prefix"], doc["middle"], doc["suffix"], str(doc.get("instruction", "")))
        else:
            raise ValueError(f"{given!r} is neither a template ({', '.join(PRESETS)}) nor JSON (a file or the text)")
    if instruction is not None:
        if template is None:
            raise ValueError("an instruction needs a pair template (this model has none: give --pair-template)")
        template = replace(template, instruction=instruction)
    return template
