"""What a kind of model is, as every layer asks it (#50: kinds as plug-ins; #69: kinds from parts).

A kind is the manifest's `kind` and the front door's `embtrt.kind`. It is a composition of parts:
an `Input` (what one item is: a text, a pair, a text or an image), one or more `Head`s (what comes out:
a pooled vector, scores, sparse weights, token vectors; each with its own front-door output, its
TensorRT plan check and its rule for TF32) and a `Routing` (the front door alone, or length pools of
bucket models beside it). Each kind is one module of this package declaring one `Kind`; the registry
(`embtrt_backend.kinds`) lists them. The layers above (export, reference, serve, measure, the
gateway) ask the kind's parts, or its named implementations, for what differs instead of its name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Input:
    """What one item of a request is, as the front door takes it."""
    name: str                        # text | pair | text or pair | text or image
    tensors: tuple[str, ...]         # the front door's text inputs every request carries: TEXT, or QUERY and DOCUMENT
    optional: tuple[str, ...] = ()   # inputs a request may add (a classifier's TEXT_PAIR)
    image: str = ""                  # the input of encoded images, where it takes them: IMAGE (a request of its own)
    # query and document texts take their own prompts (SparseEncoder's encode_query / encode_document): no one
    # default prompt applies to every text (the calibration of reduced precision tokenizes without one)
    prompts_per_side: bool = False

    @property
    def pairs(self) -> bool:
        """Its items are (query, document) pairs."""
        return len(self.tensors) == 2


@dataclass(frozen=True)
class Head:
    """What a model computes of an item, as served."""
    name: str                  # pooled | scores | scores per label | sparse | token vectors
    output: str                # the front door's output of it (a readiness probe checks it is finite)
    # its TensorRT plan check (export.onnx2trt.check_plan calls it): (manifest, plan outputs, gated graph's outputs,
    # attention masks, the gate) -> (figure, passed, what was measured); "": no plan is built for it
    plan_check: str = ""
    # an fp32 TensorRT plan may use TF32: its gate's bound allows it (a pooled vector's cosine does; a score's or a
    # weight's absolute bound does not)
    tf32: bool = False


@dataclass(frozen=True)
class Routing:
    """How requests reach the encoder."""
    name: str   # door: the front door plans and runs every bucket itself (one model, one pool); pools: bucket
    # models beside the front door (ensembles per bucket, token-id calls straight to each bucket's encoder, length
    # pools on Kubernetes, per-bucket budgets and bands)

    @property
    def length_pools(self) -> bool:
        return self.name == "pools"


TEXT = Input("text", ("TEXT",))
PAIR = Input("pair", ("QUERY", "DOCUMENT"))
TEXT_OR_PAIR = Input("text or pair", ("TEXT",), optional=("TEXT_PAIR",))
TEXT_SIDES = Input("text", ("TEXT",), prompts_per_side=True)   # a query or a document
TEXT_OR_IMAGE = Input("text or image", ("TEXT",), image="IMAGE")
# a text, an image, or both fused in one sequence (a request's TEXT and IMAGE rows side by side: row k is one input)
TEXT_AND_IMAGE = Input("text, image or both", ("TEXT",), image="IMAGE")

POOLED = Head("pooled", "EMBEDDING", "embtrt.export.onnx2trt:pooled_plan_check", tf32=True)
SCORES = Head("scores", "SCORES", "embtrt.kinds.reranker.reference_gate:plan_check")
LABEL_SCORES = Head("scores per label", "SCORES", "embtrt.kinds.classifier.reference_gate:plan_check")
SPARSE_WEIGHTS = Head("sparse", "SPARSE_VALUES", "embtrt.kinds.sparse.reference_gate:plan_check")
TOKEN_VECTORS = Head("token vectors", "TOKEN_EMBEDDINGS")

DOOR = Routing("door")
POOLS = Routing("pools")


@dataclass(frozen=True)
class Kind:
    """A kind of model: its names and messages, its parts (input, heads, routing) and its implementations in the
    builder's layers."""
    name: str                 # the manifest's `kind`, the front door's `embtrt.kind` parameter
    label: str                # "an embedder": in messages
    reference: str            # the sentence-transformers class whose outputs it serves
    operations: tuple[str, ...]   # what its models do behind the gateway (scale/gateway/ops: the operations are parts)
    metric_route: str         # the `route` label of embtrt_gateway_requests for those requests
    served_routes: str        # the gateway routes that serve it: told to a client that named it on another's
    client_hint: str          # how a model of this kind is called (told to a client of another kind that named it)
    front_door: str           # the python_backend folder its front door's model.py comes from
    input: Input              # what one item is (the front door's inputs)
    heads: tuple[Head, ...]   # what comes out (the first is the one a readiness probe checks)
    torch_encoder: str        # the embtrt_backend.torch_encoder class python-torch runs for it
    door: str                 # its front door's class in embtrt_backend.kinds.<name>.door (python_backend/router runs it)
    encoder_output: str = ""  # its graph's output; "" where the export names it (an embedder's)
    # its implementations in the builder's layers, "module:attribute", imported where used
    # (embtrt.common.plugins.implementation): the names keep this package free of the builder
    build: str = ""           # (spec, work folder, texts, log) -> BuildResult: export, gate, repository
    gateway_model: str = ""   # the gateway's class of a served model of this kind
    # (model folder, max_seq_length, buckets, trust_remote_code, prompt overrides, --default-prompt, its name) ->
    # the BuildSpec fields its reference reads of the folder; "": the embedder's (export.spec_options' own)
    spec_fields: str = ""
    measure: str = ""         # its measure.kind_measure.KindMeasure (verify, `embtrt tune`'s trial); "": the embedder's
    routing: Routing = DOOR   # how requests reach its encoder
    # the --overflow modes its front door has for a text over the max length: truncate (cut as its reference cuts);
    # reject and chunk (windows pooled into one vector) where its door has them
    overflow: tuple[str, ...] = ("truncate",)
    # its gRPC client class (`embtrt embed` of a model that takes images uses it)
    client: str = ""
    # the commands on a served model of this kind, "module:function", called through the registry (cli/measure.py,
    # measure/tune.py): `embtrt verify` (VerifyOptions, log) -> Verdict, the generic one running its measure's
    # `verify`; `embtrt bench` (BenchOptions), picked by the bench option `bench_flag` names ("--sparse") ("": the default
    # scenarios); `embtrt tune`'s trial (manifest, TuneSpec, url, texts, token counts, the error to raise) ->
    # (figures per concurrency, figures per band)
    verify_cli: str = "embtrt.cli.measure_kinds:verify_served"
    bench_cli: str = ""
    bench_flag: str = ""
    tune_trial: str = "embtrt.measure.kind_measure:tune_trial"
    # a model of this kind that ranks by another rule than a pair's score (MaxSim), in process, as `embtrt bench
    # --rerank-documents` measures its reference: (folder, requests per documents count, documents counts,
    # trust_remote_code) -> bench rows; "": none
    rank_inprocess: str = ""
    # the builder module that registers its own commands on the `embtrt` CLI (embtrt.cli imports it), "" for none
    cli: str = ""
    # pip distributions its front door imports beyond the target's (bundled with the repository): Pillow to decode images
    packages: tuple[str, ...] = ()
    # the targets its build takes, the first its default (`embtrt build --target auto`, `embtrt up`); (): every target
    targets: tuple[str, ...] = ()

    @property
    def noun(self) -> str:
        """"embedder", "sparse encoder": the label without its article."""
        return self.label.split(" ", 1)[1]

    @property
    def length_pools(self) -> bool:
        """Its repositories have bucket models that length pools and token-id routes reach (routing "pools")."""
        return self.routing.length_pools

    def has(self, head: Head) -> bool:
        """One of its heads is `head`."""
        return head in self.heads

    @property
    def inputs(self) -> tuple[str, ...]:
        """The front door's text inputs every request carries: TEXT, or QUERY and DOCUMENT."""
        return self.input.tensors

    @property
    def pairs(self) -> bool:
        """Its items are (query, document) pairs."""
        return self.input.pairs

    @property
    def image_input(self) -> str:
        """The front door's input of encoded images ("IMAGE"), where it takes them: the readiness probes send the
        probe image (embtrt_backend.images.PROBE_PNG) through it in a request of its own, beside the text one."""
        return self.input.image

    @property
    def probe_output(self) -> str:
        """The front door output a readiness probe checks is finite: its first head's."""
        return self.heads[0].output

    @property
    def plan_check(self) -> str:
        """Its TensorRT plan check: its head's, where one head on a text input has one; "" where no plan is built
        (several heads, a head without one, an image tower)."""
        return self.heads[0].plan_check if len(self.heads) == 1 and not self.input.image else ""

    @property
    def tensorrt(self) -> bool:
        """TensorRT plans are built for it (its plan check judges them)."""
        return bool(self.plan_check)

    @property
    def tf32(self) -> bool:
        """An fp32 TensorRT plan of it may use TF32: plans are built for it and its head's gate allows it."""
        return self.tensorrt and all(h.tf32 for h in self.heads)

    @property
    def composition(self) -> str:
        """"text + pooled, length pools": its parts, in messages and docs."""
        return f"{self.input.name} + {', '.join(h.name for h in self.heads)}" + \
            (", length pools" if self.length_pools else "")

    @property
    def verify(self) -> str:
        """`embtrt verify` of a served model, its measure's `verify`: (url, model, reference, texts, *,
        under_load, concurrency, against, log, trust_remote_code) -> a Verdict; "": the embedder's own
        (cli/measure.py, its cosine gate)."""
        return f"{self.measure}.verify" if self.measure else ""


@dataclass(frozen=True)
class Rule:
    """One rule of the registry's DETECTION: what kind a model folder is. The rules run in order and
    the first that matches decides (`embtrt build`'s --kind auto; embtrt.reference.detect runs them)."""
    kind: Kind
    test: str                 # "module:function" of the builder: (model folder) -> (matched, why: what it saw)
    says: str                 # what it matches, in --help and docs
    also: tuple[Kind, ...] = ()   # the other kinds --kind may serve a folder it matches as
    # it matches vision-language models that read images in one sequence with their text (ColPali): a folder of such
    # a model that only another rule matches is refused (its text side alone, or a two-tower kind, is not its output)
    vlm: bool = False

