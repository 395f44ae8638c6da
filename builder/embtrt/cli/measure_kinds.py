"""What `embtrt verify` and `embtrt bench` hand a kind (Kind.verify_cli, Kind.bench_cli): their options as
one record each, the verify of every kind that has a measure (its gate on the deployment), and the bench
document's writer. cli/measure.py reads the command line; the kinds' own modules do the rest."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from embtrt_backend.kinds import kind_of

from ..errors import SpecError, require_extra
from ..reference.verdict import Verdict
from .app import err, out


@dataclass(frozen=True)
class VerifyOptions:
    """`embtrt verify`'s options (cli/measure.py documents each); `kind` is the served model's."""
    url: str
    model: str
    kind: str
    reference: Path | None = None
    corpus: Path | None = None
    ref_pooling: str | None = None
    cosine_p50: float = 0.9999
    cosine_p01: float = 0.999
    top10_overlap: float = 0.98
    recall_regression: float = 0.005
    under_load: bool = False
    concurrency: int = 64
    load_cosine: float = 0.999
    index_identity: Path | None = None
    prompt_name: str | None = None
    against: str | None = None
    dimensions: int | None = None
    trust_remote_code: bool = False


@dataclass(frozen=True)
class BenchOptions:
    """`embtrt bench`'s options (cli/measure.py documents each); `picked` is the value of the option that chose
    the kind's scenarios (Kind.bench_flag: the documents per request, the image folder, True)."""
    url: str
    models: tuple[str, ...] = ()
    openai_url: tuple[str, ...] = ()
    openai_model: tuple[str, ...] = ()
    triton_pid: tuple[int, ...] = ()
    openai_pid: tuple[int, ...] = ()
    inprocess: bool = True
    ort_repo: Path | None = None
    engine_repo: tuple[Path, ...] = ()
    reference: Path | None = None
    corpus: Path | None = None
    buckets: str = "32,128,256"
    only: str | None = None
    concurrency: str = "1,8,32,64"
    texts_per_request: int = 1
    requests: int = 200
    warmup: int = 20
    rounds: int = 1
    out_dir: Path | None = None
    cpu_pid: tuple[str, ...] = ()
    picked: Any = None
    processes: int = 1
    floor: bool = False
    options: tuple[tuple[str, Any], ...] = ()   # --option KEY=VALUE, parsed
    as_json: bool = False
    trust_remote_code: bool = False

    def progress(self) -> Callable[[str], None]:
        return lambda msg: err.print(msg, markup=False)

    def require_models(self, flag: str, served: str) -> None:
        """SpecError where `flag`'s scenarios have no --model target to measure."""
        if not self.models:
            raise SpecError(f"{flag} needs {served} to measure: --model NAME[@HOST:PORT]")

    def require_reference(self, flag: str, peer: str, folder: str = "MODEL_DIR") -> None:
        """SpecError where the in-process `peer` line is asked for without the folder it runs."""
        if self.inprocess and self.reference is None:
            raise SpecError(f"{flag} measures {peer} beside the served model: pass --reference {folder} (the folder it "
                            "was built from), or --no-inprocess")


def verify_served(o: VerifyOptions, log) -> Verdict:
    """verify on a model whose kind has a measure (Kind.measure): the kind's gate on the deployment, its verdict."""
    from ..common.corpus import load_corpus
    from ..common.plugins import implementation

    kind = kind_of(o.kind)
    other = None
    if o.against is not None:
        other_url, _, other_model = o.against.partition("/")
        other = (other_url, other_model or o.model)
    elif o.reference is None:
        raise SpecError(f"{o.model} is a {o.kind}: its gate needs the {kind.reference} folder it was built from",
                        "pass --reference MODEL_DIR (or --against HOST:PORT[/MODEL] to gate two deployments)")
    else:
        require_extra("build", "verify", "torch", "transformers", "sentence_transformers")
    run = implementation(kind, "verify")
    return run(o.url, o.model, o.reference, load_corpus(o.corpus), under_load=o.under_load, concurrency=o.concurrency,
               against=other, log=log, trust_remote_code=o.trust_remote_code)


def emit(doc: dict, lead: dict[str, str], unit: str, out_dir: Path | None, as_json: bool) -> None:
    """A bench document: results.json and results.md (kind_measure.markdown) into --out, and JSON or the table on stdout."""
    from ..measure.kind_measure import markdown

    table = markdown(doc["results"], lead, unit)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
        (out_dir / "results.md").write_text(table)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.print(table, markup=False)
