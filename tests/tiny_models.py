"""Tiny random models, built offline from configs, for the three pooling families.

- BERT, CLS pooling, no Normalize (sentence-transformers folder), MiniLM's WordPiece vocab
- XLM-RoBERTa, mean pooling + Normalize (bge-m3 family), a Unigram tokenizer trained here
- Qwen3-style decoder, last-token pooling, left padding, a byte-level BPE trained here
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def _corpus() -> list[str]:
    from embtrt.common.corpus import load_corpus

    return load_corpus()


def _st_files(path: Path, pooling: str, normalize: bool, hidden: int, max_seq: int) -> None:
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        mods.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (path / "2_Normalize").mkdir(exist_ok=True)
    (path / "modules.json").write_text(json.dumps(mods, indent=2))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_lasttoken": pooling == "lasttoken",
    }, indent=2))
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq, "do_lower_case": False}))


def make_bert_cls(path: Path) -> Path:
    import torch
    from transformers import BertConfig, BertModel

    from embtrt.reference.modelinfo import default_model_path

    path.mkdir(parents=True, exist_ok=True)
    src = default_model_path()
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy2(src / f, path / f)
    torch.manual_seed(1)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, initializer_range=0.5)
    BertModel(cfg).eval().save_pretrained(path)
    _st_files(path, "cls", False, 32, 64)
    return path


REMOTE_CONFIG = """from transformers import BertConfig


class RemoteBertConfig(BertConfig):
    model_type = "embtrt-remote-bert"
"""

REMOTE_MODEL = """from transformers import BertModel

from .configuration_remote import RemoteBertConfig


class RemoteBertModel(BertModel):
    config_class = RemoteBertConfig
"""


REMOTE_CLASSIFIER = """from transformers import BertForSequenceClassification

from .configuration_remote import RemoteBertConfig


class RemoteBertForSequenceClassification(BertForSequenceClassification):
    config_class = RemoteBertConfig
"""


def _remote(path: Path, modeling: str, auto: dict[str, str], arch: str) -> Path:
    (path / "configuration_remote.py").write_text(REMOTE_CONFIG)
    (path / "modeling_remote.py").write_text(modeling)
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(model_type="embtrt-remote-bert", architectures=[arch],
               auto_map={"AutoConfig": "configuration_remote.RemoteBertConfig", **auto})
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


def make_remote_code_cross_encoder(path: Path) -> Path:
    """make_bert_cross_encoder whose classifier is the folder's own code (as make_remote_code_bert)."""
    make_bert_cross_encoder(path)
    return _remote(path, REMOTE_CLASSIFIER, {"AutoModelForSequenceClassification":
                                             "modeling_remote.RemoteBertForSequenceClassification"},
                   "RemoteBertForSequenceClassification")


REMOTE_MLM = """from transformers import BertForMaskedLM

from .configuration_remote import RemoteBertConfig


class RemoteBertForMaskedLM(BertForMaskedLM):
    config_class = RemoteBertConfig
"""


def make_remote_code_splade(path: Path) -> Path:
    """make_bert_splade whose MLM is the folder's own code (as make_remote_code_bert)."""
    make_bert_splade(path)
    return _remote(path, REMOTE_MLM, {"AutoModelForMaskedLM": "modeling_remote.RemoteBertForMaskedLM"},
                   "RemoteBertForMaskedLM")


def make_remote_code_bert(path: Path) -> Path:
    """make_bert_cls whose architecture is the folder's own code (config.json auto_map to
    configuration_remote.py / modeling_remote.py, a model type transformers does not know):
    it loads only with trust_remote_code."""
    make_bert_cls(path)
    return _remote(path, REMOTE_MODEL, {"AutoModel": "modeling_remote.RemoteBertModel"}, "RemoteBertModel")


def _train(model, trainer, pre, decoder, texts):
    from tokenizers import Tokenizer

    tok = Tokenizer(model)
    tok.pre_tokenizer = pre
    if decoder is not None:
        tok.decoder = decoder
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def xlmr_tokenizer(path: Path, vocab_size: int, max_length: int):
    """An XLM-R-style tokenizer trained on the corpus (Unigram, Metaspace, XLM-R's special ids 0-4:
    <s> <pad> </s> <unk> <mask>), saved into `path` -> (the tokenizers.Tokenizer, the transformers fast tokenizer)."""
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    from transformers import XLMRobertaTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok = _train(models.Unigram(), trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials, unk_token="<unk>"),
                 pre_tokenizers.Metaspace(), decoders.Metaspace(), _corpus())
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    tmp = path / "_tok.json"
    tok.save(str(tmp))
    fast = XLMRobertaTokenizerFast(tokenizer_file=str(tmp), model_max_length=max_length)
    tmp.unlink()
    fast.save_pretrained(path)
    return tok, fast


def make_bert_mean_64(path: Path) -> Path:
    """A BERT of 2 layers, 64 wide, mean pooling + Normalize, MiniLM's WordPiece vocabulary: its encoder
    costs almost nothing, so that a served request's time is the request path's (benchmarks/path.py)."""
    import torch
    from transformers import BertConfig, BertModel

    from embtrt.reference.modelinfo import default_model_path

    path.mkdir(parents=True, exist_ok=True)
    src = default_model_path()
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy2(src / f, path / f)
    torch.manual_seed(3)
    cfg = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=512, initializer_range=0.5)
    BertModel(cfg, add_pooling_layer=False).eval().save_pretrained(path)
    _st_files(path, "mean", True, 64, 256)
    return path


def make_xlmr_mean(path: Path) -> Path:
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    tok, fast = xlmr_tokenizer(path, 2000, 128)
    torch.manual_seed(2)
    cfg = XLMRobertaConfig(vocab_size=tok.get_vocab_size(), hidden_size=48, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=96, max_position_embeddings=130,
                           pad_token_id=fast.pad_token_id, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
                           initializer_range=0.2)
    XLMRobertaModel(cfg, add_pooling_layer=False).eval().save_pretrained(path)
    _st_files(path, "mean", True, 48, 128)
    return path


def make_qwen3_last(path: Path) -> Path:
    import torch
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3Model

    path.mkdir(parents=True, exist_ok=True)
    eos = "<|endoftext|>"
    tok = _train(models.BPE(), trainers.BpeTrainer(vocab_size=1500, special_tokens=[eos],
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
                 pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel(), _corpus())
    tok.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, tok.token_to_id(eos))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=eos, model_max_length=96,
                                   padding_side="left")
    fast.save_pretrained(path)
    torch.manual_seed(3)
    cfg = Qwen3Config(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=256,
                      pad_token_id=fast.pad_token_id, eos_token_id=fast.eos_token_id, tie_word_embeddings=False)
    Qwen3Model(cfg).eval().save_pretrained(path)
    return path


MAKERS = {"bert-cls": make_bert_cls, "xlmr-mean": make_xlmr_mean, "qwen3-last": make_qwen3_last}


def make_qwen3_bert_tokenizer(path: Path) -> Path:
    """A sentence-transformers folder whose BERT-style tokenizer emits token_type_ids while its model,
    a tiny Qwen3 decoder (last-token pooling, left padding), does not take them. Not in MAKERS: one
    test builds it."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3Model

    from embtrt.reference.modelinfo import default_model_path

    path.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(default_model_path()))
    tok.padding_side = "left"
    tok.save_pretrained(path)
    torch.manual_seed(4)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=256,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id, tie_word_embeddings=False)
    Qwen3Model(cfg).eval().save_pretrained(path)
    _st_files(path, "lasttoken", True, 32, 96)
    return path


def make_bert_16k(path: Path, heads: int = 2, layers: int = 2) -> Path:
    """A tiny sentence-transformers BERT that takes 16,384 tokens (hidden 32, `layers` layers, `heads` attention
    heads, mean pooling, normalized), with all-MiniLM-L6-v2's WordPiece tokenizer. Not in MAKERS: the 16K tests
    build it (one layer, one head) and benchmarks/preempt.py (two and two, as its recorded results)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from embtrt.reference.modelinfo import default_model_path

    path.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(default_model_path()))
    tok.model_max_length = 16384
    tok.save_pretrained(path)
    torch.manual_seed(5)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=64, max_position_embeddings=16384)
    BertModel(cfg, add_pooling_layer=False).eval().save_pretrained(path)
    _st_files(path, "mean", True, 32, 16384)
    return path


def long_texts(tokenizer_json: Path, lengths: tuple[int, ...] = (16384, 12000, 5000)) -> list[str]:
    """Real text long enough to fill each length in tokens (corpus texts concatenated, then cut at a word)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.no_truncation()
    tok.no_padding()
    corpus = _corpus()
    out = []
    for n in lengths:
        words: list[str] = []
        i = 0
        while len(tok.encode(" ".join(words)).ids) < n:
            words += corpus[i % len(corpus)].split()
            i += 1
        lo, hi = 1, len(words)   # the longest prefix of words that fits n tokens
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(tok.encode(" ".join(words[:mid])).ids) <= n:
                lo = mid
            else:
                hi = mid - 1
        out.append(" ".join(words[:lo]))
    return out


def with_prompts(src: Path, dest: Path, prompts: dict[str, str], default: str | None, include_prompt: bool = True) -> Path:
    """A copy of a tiny sentence-transformers folder with prompts in config_sentence_transformers.json,
    a default_prompt_name, and the Pooling config's include_prompt (Qwen3-Embedding-style)."""
    shutil.copytree(src, dest)
    (dest / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": prompts, "default_prompt_name": default, "similarity_fn_name": "cosine"}, indent=2))
    pooling = dest / "1_Pooling" / "config.json"
    cfg = json.loads(pooling.read_text())
    cfg["include_prompt"] = include_prompt
    pooling.write_text(json.dumps(cfg, indent=2))
    return dest


# ---- cross-encoders (rerankers) -------------------------------------------------------------------

def _save_cross_encoder(hf_dir: Path, dest: Path, max_length: int, prompts: dict[str, str] | None = None) -> Path:
    """A sentence-transformers CrossEncoder folder (model_type CrossEncoder, its activation, its
    prompts) from a saved *ForSequenceClassification model and tokenizer, as CrossEncoder.save writes it."""
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(str(hf_dir), max_length=max_length, prompts=prompts)
    ce.save(str(dest))
    shutil.rmtree(hf_dir)
    return dest


def make_bert_cross_encoder(path: Path) -> Path:
    """A one-label BERT cross-encoder (sigmoid), MiniLM's WordPiece vocab, max length 64, with a
    "query" prompt (no default: requests pick it by prompt_name)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from embtrt.reference.modelinfo import default_model_path

    hf = path.with_name(path.name + "-hf")
    tok = AutoTokenizer.from_pretrained(str(default_model_path()))
    tok.save_pretrained(hf)
    torch.manual_seed(11)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, initializer_range=0.2, num_labels=1)
    BertForSequenceClassification(cfg).eval().save_pretrained(hf)
    return _save_cross_encoder(hf, path, 64, prompts={"query": "Given a web search query, rank the passage. Query: "})


def make_xlmr_cross_encoder(path: Path) -> Path:
    """A three-label XLM-R cross-encoder (identity activation), a Unigram tokenizer trained here."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

    src = make_xlmr_mean(path.with_name(path.name + "-enc"))
    hf = path.with_name(path.name + "-hf")
    hf.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy2(f, hf / f.name)
    base = json.loads((src / "config.json").read_text())
    shutil.rmtree(src)
    torch.manual_seed(12)
    cfg = XLMRobertaConfig(vocab_size=base["vocab_size"], hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=96, max_position_embeddings=130, pad_token_id=base["pad_token_id"],
                           bos_token_id=0, eos_token_id=2, type_vocab_size=1, initializer_range=0.2, num_labels=3)
    XLMRobertaForSequenceClassification(cfg).eval().save_pretrained(hf)
    return _save_cross_encoder(hf, path, 96)


def make_minilm_cross_encoder(path: Path) -> Path:
    """The bundled all-MiniLM-L6-v2 encoder with a seeded one-label classification head."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    from embtrt.reference.modelinfo import default_model_path

    src = default_model_path()
    hf = path.with_name(path.name + "-hf")
    torch.manual_seed(13)
    model = BertForSequenceClassification.from_pretrained(str(src), num_labels=1)
    with torch.no_grad():  # a head that tells pairs apart (the default init gives scores within 0.002 of 0.5)
        model.classifier.weight.normal_(0.0, 0.5)
    model.eval().save_pretrained(hf)
    AutoTokenizer.from_pretrained(str(src)).save_pretrained(hf)
    return _save_cross_encoder(hf, path, 256)


def make_qwen3_cross_encoder(path: Path) -> Path:
    """A tiny Qwen3ForSequenceClassification (one label, sigmoid; the seq-cls conversions of
    Qwen3-Reranker): left padding in sentence-transformers, the score read at the last token."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForSequenceClassification

    src = make_qwen3_last(path.with_name(path.name + "-enc"))
    hf = path.with_name(path.name + "-hf")
    hf.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy2(f, hf / f.name)
    shutil.rmtree(src)
    tok = AutoTokenizer.from_pretrained(str(hf))
    torch.manual_seed(14)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=8, intermediate_size=64, max_position_embeddings=256, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id, tie_word_embeddings=False, num_labels=1, initializer_range=0.2)
    Qwen3ForSequenceClassification(cfg).eval().save_pretrained(hf)
    return _save_cross_encoder(hf, path, 96)


def make_bert_classifier(path: Path) -> Path:
    """A three-label BERT sequence classifier (negative / neutral / positive: softmax), MiniLM's WordPiece
    vocab, saved by transformers alone (no CrossEncoder config): a classifier by its labels."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from embtrt.reference.modelinfo import default_model_path

    AutoTokenizer.from_pretrained(str(default_model_path())).save_pretrained(path)
    torch.manual_seed(21)
    labels = ["negative", "neutral", "positive"]
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=128, initializer_range=0.2, num_labels=3,
                     id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    BertForSequenceClassification(cfg).eval().save_pretrained(path)
    return path


def make_multilabel_classifier(path: Path) -> Path:
    """A four-label multi-label XLM-R classifier (problem_type multi_label_classification: sigmoid per
    label in transformers' pipeline, softmax in TEI's rule), a Unigram tokenizer trained here."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

    src = make_xlmr_mean(path.with_name(path.name + "-enc"))
    path.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy2(f, path / f.name)
    base = json.loads((src / "config.json").read_text())
    shutil.rmtree(src)
    torch.manual_seed(22)
    labels = ["sports", "politics", "science", "art"]
    cfg = XLMRobertaConfig(vocab_size=base["vocab_size"], hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=96, max_position_embeddings=130, pad_token_id=base["pad_token_id"],
                           bos_token_id=0, eos_token_id=2, type_vocab_size=1, initializer_range=0.2, num_labels=4,
                           id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)},
                           problem_type="multi_label_classification")
    XLMRobertaForSequenceClassification(cfg).eval().save_pretrained(path)
    return path


CLASSIFIERS = {"bert-cls3": make_bert_classifier, "xlmr-ml4": make_multilabel_classifier}


CROSS_ENCODERS = {"bert-ce": make_bert_cross_encoder, "xlmr-ce3": make_xlmr_cross_encoder,
                  "qwen3-ce": make_qwen3_cross_encoder}


# ---- sparse encoders (SPLADE) ---------------------------------------------------------------------

def _tiny_mlm(hf: Path, seed: int) -> None:
    """Into hf: MiniLM's WordPiece tokenizer and a tiny seeded BertForMaskedLM (2 layers, width 32)
    whose negative vocabulary bias leaves about a hundred active dimensions per text, as trained
    SPLADE. The torch RNG is left where the model's init leaves it (callers draw from it next)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from embtrt.reference.modelinfo import default_model_path

    AutoTokenizer.from_pretrained(str(default_model_path())).save_pretrained(hf)
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, initializer_range=0.2)
    mlm = BertForMaskedLM(cfg).eval()
    with torch.no_grad():
        mlm.cls.predictions.bias.fill_(-4.0)
    mlm.save_pretrained(hf)


def make_bert_splade(path: Path, max_active_dims: int | None = None) -> Path:
    """A tiny SPLADE SparseEncoder (BERT MLM head, max pooling, relu), MiniLM's WordPiece vocab,
    max length 64, with query and document prompts (encode_query prepends its prompt); with
    `max_active_dims`, the folder's default K (encode keeps each vector's K largest weights)."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    hf = path.with_name(path.name + "-hf")
    _tiny_mlm(hf, 21)
    se = SparseEncoder(modules=[MLMTransformer(str(hf), max_seq_length=64), SpladePooling(pooling_strategy="max")],
                       prompts={"query": "query: ", "document": ""}, max_active_dims=max_active_dims)
    se.save(str(path))
    shutil.rmtree(hf)
    return path


def make_minilm_splade(path: Path) -> Path:
    """The bundled all-MiniLM-L6-v2 encoder as a SPLADE SparseEncoder: its six layers under a seeded
    MLM head (the decoder tied to its word embeddings, a negative vocabulary bias for about a hundred
    active dimensions per text), max pooling, relu, max length 256, a query prompt. The size of
    real MiniLM SPLADE models (22M parameters and a 30522-token output)."""
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from embtrt.reference.modelinfo import default_model_path

    src = default_model_path()
    hf = path.with_name(path.name + "-hf")
    torch.manual_seed(23)
    mlm = BertForMaskedLM.from_pretrained(str(src), config=BertConfig.from_pretrained(str(src)))
    with torch.no_grad():
        mlm.cls.predictions.bias.fill_(-4.5)
    mlm.eval().save_pretrained(hf)
    AutoTokenizer.from_pretrained(str(src)).save_pretrained(hf)
    se = SparseEncoder(modules=[MLMTransformer(str(hf), max_seq_length=256), SpladePooling(pooling_strategy="max")],
                       prompts={"query": "query: ", "document": ""})
    se.save(str(path))
    shutil.rmtree(hf)
    return path


def make_inference_free_splade(path: Path) -> Path:
    """A tiny inference-free SPLADE: a Router whose query side is a SparseStaticEmbedding (seeded
    per-token weights, no encoder) and whose document side is an MLM + SpladePooling."""
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, Router, SparseStaticEmbedding, SpladePooling

    hf = path.with_name(path.name + "-hf")
    _tiny_mlm(hf, 22)
    doc = MLMTransformer(str(hf), max_seq_length=64)
    query = SparseStaticEmbedding(tokenizer=doc.tokenizer, weight=torch.rand(30522) * 2, frozen=True)
    router = Router.for_query_document(query_modules=[query], document_modules=[doc, SpladePooling("max")])
    SparseEncoder(modules=[router], similarity_fn_name="dot").save(str(path))
    shutil.rmtree(hf)
    return path
