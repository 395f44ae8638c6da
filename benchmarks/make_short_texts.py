"""Regenerate benchmarks/data/debian-short-descriptions.txt: 1,000 real short texts, offline.

Source: the one-line package descriptions (the `Description:` field's first line) of Debian 12
"bookworm" main, as `apt-cache dumpavail` prints them after `apt-get update` (bookworm,
bookworm-updates, bookworm-security). Debian's package descriptions are written by each
package's maintainers and published in the archive's Packages files. Selection: distinct
descriptions of 9 to 29 tokens (the bundled all-MiniLM-L6-v2 tokenizer, special tokens counted),
sorted, then every k-th so that 1,000 remain: a deterministic, spread sample of the short, varied
queries a search box sees (product names, a few words of description).

    python benchmarks/make_short_texts.py            # reads `apt-cache dumpavail`
    python benchmarks/make_short_texts.py --packages FILE   # or a Packages file
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "debian-short-descriptions.txt"
COUNT, LOW, HIGH = 1000, 9, 29


def descriptions(text: str) -> list[str]:
    return sorted({line.split(":", 1)[1].strip() for line in text.splitlines()
                   if line.startswith("Description:") and line.split(":", 1)[1].strip()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packages", type=Path, help="a Debian Packages file. Default: `apt-cache dumpavail`.")
    args = ap.parse_args()
    raw = args.packages.read_text() if args.packages else subprocess.run(
        ["apt-cache", "dumpavail"], check=True, capture_output=True, text=True).stdout
    from tokenizers import Tokenizer

    from embtrt.reference.modelinfo import default_model_path

    tok = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    texts = [t for t in descriptions(raw) if LOW <= len(tok.encode(t).ids) <= HIGH]
    if len(texts) < COUNT:
        raise SystemExit(f"only {len(texts)} descriptions of {LOW}-{HIGH} tokens; need {COUNT}")
    step = len(texts) / COUNT
    picked = [texts[int(i * step)] for i in range(COUNT)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(picked) + "\n")
    print(f"wrote {OUT} ({COUNT} of {len(texts)} descriptions of {LOW}-{HIGH} tokens)")


if __name__ == "__main__":
    main()
