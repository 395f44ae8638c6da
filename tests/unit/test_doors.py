"""One front door for every kind (#50 item 2): python_backend/router/model.py runs the kind's Door
(embtrt_backend.doors.<kind>), chosen by the kind's `door`; what a door reads of a request for the
long-text lane is each row's UTF-8 bytes, a pair's two texts together."""

from importlib import import_module

import numpy as np
from embtrt_backend.doors import Door
from embtrt_backend.kinds.reranker.door import RerankerDoor
from embtrt_backend.kinds import KINDS, RERANKER


def test_every_kind_names_a_door_of_its_own_module_with_its_inputs():
    for kind in KINDS:
        cls = getattr(import_module(f"embtrt_backend.kinds.{kind.name}.door"), kind.door)
        # the kind's inputs (every request sends them), then any the door reads where present (optional in the config)
        assert issubclass(cls, Door) and cls.inputs[:len(kind.inputs)] == kind.inputs, kind.name
    assert RerankerDoor.inputs == RERANKER.inputs == ("QUERY", "DOCUMENT")
    from embtrt_backend.kinds import CLASSIFIER
    from embtrt_backend.kinds.classifier.door import ClassifierDoor

    assert (CLASSIFIER.inputs, ClassifierDoor.inputs) == (("TEXT",), ("TEXT", "TEXT_PAIR"))


def test_row_bytes_are_each_texts_and_a_pairs_two_together():
    door = Door()
    text = np.array([[b"abc"], ["\u00e9t\u00e9".encode()], [b""]], dtype=object)
    assert door.row_bytes({"TEXT": text}) == [3, 5, 0]
    q = np.array([[b"q"], [b"query"]], dtype=object)
    d = np.array([[b"a long document"], [b"d"]], dtype=object)
    assert door.row_bytes({"QUERY": q, "DOCUMENT": d}) == [16, 6]
    assert door.row_bytes({"TEXT": None}) == []
