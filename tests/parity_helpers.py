"""Parity checks that can fail: the model must tell texts apart, and every row is judged in order.

A parity check "served vector ~ reference vector, cosine >= 0.9999" proves nothing on a model whose
vectors are all alike: a random BERT with the default initializer_range gives cosine >= 0.99995
between any two texts, so swapped rows, a wrong pooling or a dropped prompt still pass.
`assert_discriminating` is called before a parity check on a tiny model and fails where the
model's reference vectors of different texts (and of one text under different prompts) are not
well apart. `assert_rows_equal` compares every row with its own reference row, in order, with a
minimum; `assert_reduced_precision` is the gate for paths whose precision is reduced on purpose.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from embtrt.reference.parity import cosine_rows

DISCRIMINATING_MEDIAN = 0.99   # median pairwise cosine of different texts must be below this
EXACT_MIN = 0.9999             # fp32 paths: every row


def pairwise_cosines(vectors: np.ndarray) -> np.ndarray:
    """Cosines of every pair of different rows (upper triangle)."""
    x = np.asarray(vectors, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
    sim = x @ x.T
    return sim[np.triu_indices(len(x), k=1)]


def assert_apart(vectors: np.ndarray, what: str, limit: float = DISCRIMINATING_MEDIAN) -> float:
    """The median pairwise cosine of these (different) rows is below `limit`; returns it."""
    med = float(np.median(pairwise_cosines(vectors)))
    assert med < limit, (f"{what}: median pairwise cosine {med:.6f} >= {limit}: the vectors are nearly "
                         "alike, so a parity check on them cannot fail")
    return med


def assert_rows_distinguishable(rows: np.ndarray, margin: float, what: str) -> float:
    """Every row differs from every other in some value by more than `margin` (a parity bound's multiple), so a
    row swapped, shifted or taken from another input fails a check at that bound; returns the smallest gap."""
    rows = np.asarray(rows, np.float64).reshape(len(rows), -1)
    gaps = np.abs(rows[:, None, :] - rows[None, :, :]).max(axis=2)
    np.fill_diagonal(gaps, np.inf)
    low = float(gaps.min()) if len(rows) > 1 else float("inf")
    i, j = np.unravel_index(int(np.argmin(gaps)), gaps.shape) if len(rows) > 1 else (0, 0)
    assert low > margin, (f"{what}: rows {i} and {j} differ by at most {low:.2e} <= {margin:.0e}: a check at that "
                          "bound cannot tell them apart")
    return low


def assert_discriminating(folder: Path, texts: list[str], prompts: tuple[str, ...] = (),
                          limit: float = DISCRIMINATING_MEDIAN) -> None:
    """SentenceTransformer.encode of `folder` tells these texts apart, and (for each prompt name
    given, plus the default) one text under different prompts apart: the median cosine of each
    text's vectors under two different prompts is below `limit` as well."""
    from embtrt.reference.torch_ref import st_embed

    distinct = list(dict.fromkeys(texts))
    assert len(distinct) >= 8, "judge discrimination on at least 8 different texts"
    assert_apart(st_embed(folder, distinct), f"{folder.name}: different texts", limit)
    if prompts:
        by_prompt = [st_embed(folder, distinct, prompt_name=p) for p in prompts]
        by_prompt.append(st_embed(folder, distinct, prompt=""))   # no prompt at all
        for i in range(len(by_prompt)):
            for j in range(i + 1, len(by_prompt)):
                med = float(np.median(cosine_rows(by_prompt[i], by_prompt[j])))
                names = [*prompts, "no prompt"]
                assert med < limit, (f"{folder.name}: one text under prompts {names[i]!r} and {names[j]!r}: "
                                     f"median cosine {med:.6f} >= {limit}: a dropped prompt could not fail")


def assert_rows_equal(ref: np.ndarray, got: np.ndarray, minimum: float = EXACT_MIN, what: str = "") -> np.ndarray:
    """Every row of `got` equals its own row of `ref` (same order): the smallest cosine is at least
    `minimum`; the message names the worst rows. Returns the cosines."""
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != reference {ref.shape}"
    cos = cosine_rows(ref, got)
    worst = np.argsort(cos)[:3]
    assert cos.min() >= minimum, (f"{what}: cosine min {cos.min():.6f} < {minimum}; worst rows "
                                  + ", ".join(f"{i}: {cos[i]:.6f}" for i in worst))
    return cos


def assert_reduced_precision(ref: np.ndarray, got: np.ndarray, p50: float = 0.9999, p01: float = 0.999,
                             what: str = "") -> np.ndarray:
    """The gate for paths whose precision is reduced on purpose (fp16, bf16): p50 and p01, row by row
    in order."""
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != reference {ref.shape}"
    cos = cosine_rows(ref, got)
    assert np.percentile(cos, 50) >= p50, f"{what}: cosine p50 {np.percentile(cos, 50):.6f} < {p50}"
    assert np.percentile(cos, 1) >= p01, f"{what}: cosine p01 {np.percentile(cos, 1):.6f} < {p01}"
    return cos


def _st_pooling(folder: Path) -> tuple[str, bool]:
    """(pooling, normalize) from a sentence-transformers folder's own files."""
    import json

    cfg = json.loads((folder / "1_Pooling" / "config.json").read_text())
    pooling = next(k for k, want in (("cls", "pooling_mode_cls_token"), ("mean", "pooling_mode_mean_tokens"),
                                     ("lasttoken", "pooling_mode_lasttoken")) if cfg.get(want))
    mods = json.loads((folder / "modules.json").read_text())
    return pooling, any(m["type"].endswith("Normalize") for m in mods)


def onnx_file_vectors(onnx_path: Path, folder: Path, texts: list[str], pooling: str, max_length: int,
                      pad_to: int | None = None) -> np.ndarray:
    """ONNX Runtime on one ONNX file of a repository, fed by the Hugging Face tokenizer of the source
    folder (none of embtrt's serving code): the graph's own inputs, pooled here when the graph gives
    hidden states. `pad_to`: pad every row to that length (a bucket's fixed shape)."""
    import onnx
    import onnxruntime as ort
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    names = [i.name for i in onnx.load(str(onnx_path), load_external_data=False).graph.input]
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    out = []
    for i in range(0, len(texts), 8):
        enc = tok(texts[i:i + 8], padding="max_length" if pad_to else True, max_length=pad_to or max_length,
                  truncation=True, return_tensors="np")
        feeds = {n: (enc[n] if n in enc else np.zeros_like(enc["input_ids"])).astype(np.int64) for n in names}
        y = sess.run(None, feeds)[0].astype(np.float64)
        if y.ndim == 3:   # hidden states: pool with the mask
            mask = feeds["attention_mask"].astype(np.float64)
            if pooling == "mean":
                y = (y * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            elif pooling == "cls":
                y = y[:, 0]
            else:         # last token: the last position the mask keeps (left or right padding)
                last = mask.shape[1] - 1 - np.argmax(mask[:, ::-1], axis=1)
                y = y[np.arange(len(y)), last]
        out.append(y)
    return np.concatenate(out).astype(np.float32)


def repository_onnx_files(repo: Path) -> dict[str, Path]:
    """{model name: its 1/model.onnx} for every model of a repository that has one."""
    return {p.parents[1].name: p for p in sorted(repo.glob("*/1/model.onnx"))}
