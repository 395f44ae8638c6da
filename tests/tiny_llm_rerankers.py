"""Tiny seeded LLM-style rerankers (#71): a Qwen3 decoder that scores a (query, document) pair by its
"yes" against its "no" logit at the last token of Qwen3-Reranker's prompt template, in both of the
forms served: the original causal LM (`*ForCausalLM`, as Qwen/Qwen3-Reranker-* ship) and its
sequence-classification conversion (one label whose weight row is lm_head["yes"] - lm_head["no"], as
the seq-cls conversions ship). A byte-level BPE tokenizer trained on the corpus, with Qwen's chat
special tokens and "yes" / "no" as tokens of their own, padding on the left as Qwen's."""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# Qwen3-Reranker's model card: the system prompt, the user turn, and an empty thinking block to answer after
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
          "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def model_card_text(query: str, document: str, instruction: str | None = None) -> str:
    """The model card's format_instruction: the text between the prefix and the suffix."""
    return f"<Instruct>: {instruction or INSTRUCTION}\n<Query>: {query}\n<Document>: {document}"


def _tokenizer(path: Path, max_length: int):
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from tiny_models import _corpus, _train

    texts = _corpus() + ["yes", "no"] * 400   # the answer words become tokens of their own
    tok = _train(models.BPE(), trainers.BpeTrainer(vocab_size=1500, special_tokens=SPECIALS,
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), decoders.ByteLevel(), texts)
    assert tok.token_to_id("yes") is not None and tok.token_to_id("no") is not None
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIALS[2], pad_token=SPECIALS[0],
                                   additional_special_tokens=SPECIALS[1:], model_max_length=max_length,
                                   padding_side="left")
    fast.save_pretrained(path)
    return fast


def make_qwen3_reranker(path: Path, max_length: int = 256) -> Path:
    """The original form: a tiny Qwen3ForCausalLM (2 layers, 32 wide, seeded) and its tokenizer; no
    sentence-transformers files, as Qwen/Qwen3-Reranker-0.6B ships."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(path, max_length)
    torch.manual_seed(31)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=max_length,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
                      initializer_range=0.2)
    Qwen3ForCausalLM(cfg).eval().save_pretrained(path)
    return path


def make_qwen3_reranker_seq_cls(path: Path, causal: Path) -> Path:
    """The sequence-classification conversion of `causal` (a CrossEncoder folder): the same decoder under
    a one-label head whose row is lm_head["yes"] - lm_head["no"], so that its logit is the causal form's
    log-odds and CrossEncoder's sigmoid its P(yes)."""
    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM, Qwen3ForSequenceClassification

    from tiny_models import _save_cross_encoder

    tok = AutoTokenizer.from_pretrained(str(causal))
    lm = Qwen3ForCausalLM.from_pretrained(str(causal)).eval()
    cfg = lm.config
    cfg.num_labels, cfg.architectures = 1, ["Qwen3ForSequenceClassification"]
    seq = Qwen3ForSequenceClassification(cfg).eval()
    seq.model.load_state_dict(lm.model.state_dict())
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    with torch.no_grad():
        seq.score.weight.copy_((lm.lm_head.weight[yes] - lm.lm_head.weight[no]).unsqueeze(0))
    hf = path.with_name(path.name + "-hf")
    seq.save_pretrained(hf)
    tok.save_pretrained(hf)
    return _save_cross_encoder(hf, path, int(tok.model_max_length))


def model_card_scores(causal: Path, pairs: list[tuple[str, str]], instruction: str | None = None,
                      max_length: int | None = None) -> list[float]:
    """Qwen3-Reranker's model card computation, as written there: the template's middle tokenized without
    special tokens and cut to max_length less the prefix and suffix, prefix + middle + suffix, padded on the
    left; the last position's logits of "no" and "yes", log_softmax, P(yes)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(causal), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(causal), dtype=torch.float32).eval()
    max_length = max_length or int(tok.model_max_length)
    prefix = tok.encode(PREFIX, add_special_tokens=False)
    suffix = tok.encode(SUFFIX, add_special_tokens=False)
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    texts = [model_card_text(q, d, instruction) for q, d in pairs]
    inputs = tok(texts, padding=False, truncation="longest_first", return_attention_mask=False,
                 max_length=max_length - len(prefix) - len(suffix))
    inputs["input_ids"] = [prefix + ids + suffix for ids in inputs["input_ids"]]
    batch = tok.pad(inputs, padding=True, return_tensors="pt", max_length=max_length)
    with torch.inference_mode():
        last = model(**batch).logits[:, -1, :]
    two = torch.nn.functional.log_softmax(torch.stack([last[:, no], last[:, yes]], dim=1), dim=1)
    return two[:, 1].exp().tolist()
