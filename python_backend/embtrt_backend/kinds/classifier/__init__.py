"""The classifier: transformers' AutoModelForSequenceClassification, a score per label of each text
or text pair (a *ForSequenceClassification folder that is not a reranker: several labels, not
saved as a CrossEncoder)."""

from ..base import TEXT_OR_PAIR, LABEL_SCORES, Kind

KIND = Kind(
    name="classifier", label="a classifier", reference="AutoModelForSequenceClassification",
    operations=("classify",), metric_route="classify",
    served_routes="POST /predict (TEI), /classify (vLLM) or / (TEI, as the default model)",
    client_hint="classify with ClassifyClient / `embtrt classify`",
    front_door="router", input=TEXT_OR_PAIR, heads=(LABEL_SCORES,), door="ClassifierDoor", torch_encoder="TorchClassifier",
    encoder_output="logits",
    build="embtrt.kinds.classifier.export:build_classifier_in", spec_fields="embtrt.kinds.classifier.export:spec_fields",
    gateway_model="embtrt.kinds.classifier.scale:Classifier",
    measure="embtrt.kinds.classifier.measure:ClassifyMeasure",
    cli="embtrt.kinds.classifier.cli", client="embtrt.kinds.classifier.serve:ClassifyClient",
    bench_cli="embtrt.kinds.classifier.cli:bench", bench_flag="--classify",
)
