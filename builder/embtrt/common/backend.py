"""The serving-side logic (python_backend/embtrt_backend) for the builder, the gateway and the
benchmarks: the same tokenizer, routing and pooling code the models run.

embtrt_backend is a package of its own in the wheel (and in an editable install), the lowest layer
below everything in builder/ (tests/typecheck/import_layers.py): modules import it like any other
package, with no sys.path edits. Repositories carry their own copy of it next to each model.py.
"""

from __future__ import annotations


def backend_lib():
    """The (text, encoder) modules of embtrt_backend."""
    from embtrt_backend import encoder, text

    return text, encoder
