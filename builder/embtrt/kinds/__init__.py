"""The builder's side of each kind of model that has its own package (#50: kinds as plug-ins): one
module per layer it touches, named by the layer (`export`, `reference`, `serve`, `measure`,
`scale`; `<layer>_<what>` where a layer holds two), each under the import rules of its layer
(tests/typecheck/import_layers.py). The layers reach a kind through its `Kind`
(embtrt_backend.kinds: "module:attribute" names, embtrt.common.plugins), never by its name.
docs/kinds.md has the interface and what adding a kind means, file by file."""
