"""What a kind of model is, as every layer asks it (#50: kinds as plug-ins).

A kind is the manifest's `kind` and the front door's `embtrt.kind`: an embedder, a reranker or a
sparse encoder today. Each kind is one module of this package declaring one `Kind`; the registry
(`embtrt_backend.kinds`) lists them. The layers above (export, reference, serve, measure, the
gateway) ask the kind for what differs instead of comparing its name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    name: str                 # the manifest's `kind`, the front door's `embtrt.kind` parameter
    label: str                # "an embedder": in messages
    reference: str            # the sentence-transformers class whose outputs it serves
    operations: tuple[str, ...]   # what its models do behind the gateway (scale/gateway/operations.py)
    metric_route: str         # the `route` label of embtrt_gateway_requests for those requests
    served_routes: str        # the gateway routes that serve it: told to a client that named it on another's
    client_hint: str          # how a model of this kind is called (told to a client of another kind that named it)
    front_door: str           # the python_backend folder its front door's model.py comes from
    inputs: tuple[str, ...]   # the front door's text inputs: TEXT, or QUERY and DOCUMENT
    probe_output: str         # the front door output a readiness probe checks is finite
    torch_encoder: str        # the embtrt_backend.torch_encoder class python-torch runs for it
    door: str                 # its front door's class in embtrt_backend.kinds.<name>.door (python_backend/router runs it)
    encoder_output: str = ""  # its graph's output; "" where the export names it (an embedder's)
    # its implementations in the builder's layers, "module:attribute", imported where used
    # (embtrt.common.plugins.implementation): the names keep this package free of the builder
    build: str = ""           # (spec, work folder, texts, log) -> BuildResult: export, gate, repository
    gateway_model: str = ""   # the gateway's class of a served model of this kind
    # the gateway operations (scale.gateway.operations.Operation rows) this kind brings: those of its
    # `operations` that no other kind brings
    gateway_operations: str = ""
    # (model folder, max_seq_length, buckets, trust_remote_code, prompt overrides, --default-prompt, its name) ->
    # the BuildSpec fields its reference reads of the folder; "": the embedder's (export.spec_options' own)
    spec_fields: str = ""
    measure: str = ""         # its measure.kind_measure.KindMeasure (verify, `embtrt tune`'s trial); "": the embedder's
    # its TensorRT plan check (export.onnx2trt.check_plan calls it): (manifest, plan outputs, gated graph's outputs,
    # attention masks, the gate) -> (figure, passed, what was measured); "": not built for the tensorrt target
    plan_check: str = ""
    # how requests reach its encoder: "door" (the front door plans and runs every bucket itself: one model, one
    # pool) or "pools" (bucket models beside the front door: ensembles per bucket, token-id calls straight to
    # each bucket's encoder, length pools on Kubernetes, per-bucket budgets and bands)
    routing: str = "door"
    # the builder module that registers its own commands on the `embtrt` CLI (embtrt.cli imports it), "" for none
    cli: str = ""
    # pip distributions its front door imports beyond the target's (bundled with the repository): Pillow to decode images
    packages: tuple[str, ...] = ()
    # the front door's input of encoded images, where it takes them ("IMAGE"): the readiness probes send the probe
    # image (embtrt_backend.images.PROBE_PNG) through it in a request of its own, beside the text one
    image_input: str = ""

    @property
    def noun(self) -> str:
        """"embedder", "sparse encoder": the label without its article."""
        return self.label.split(" ", 1)[1]

    @property
    def length_pools(self) -> bool:
        """Its repositories have bucket models that length pools and token-id routes reach (routing "pools")."""
        return self.routing == "pools"

    @property
    def pairs(self) -> bool:
        """Its items are (query, document) pairs."""
        return len(self.inputs) == 2

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

