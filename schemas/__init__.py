"""The contracts of speechpack: what a writer and a reader must agree on, once.

The pack format (``format``: its docstring is the specification; the manifest file ``manifest_file``; the
columnar index and its checks ``columns``, and its deflated copies for stores ``deflated_columns``, format 1.5;
``.npy`` headers ``npyfile``; per-piece digests ``digests``, format 1.4), one row per pack kind (``kinds``)
and per cue representation (``cue_banks``; ``cues`` is the ``cues.yaml`` contract), names and values
(``constants``, ``units``: conversions and every option's range, ``names``: what a pack may name, ``timebase``:
ASD's 25 Hz frames), input manifests (``wesep_list``), a refused input line (``line_problems``: one type for every
reader), untrusted documents read with bounds (``documents``: JSON and input lines, ``yaml_document``), pictures'
shared axis rules (``plotting``) and the error types (``errors``).

Contracts only, and nothing heavy, so readers, writers and validators can all depend on it: numpy, plus PyYAML for
YAML documents (``yaml_document``); matplotlib only inside ``plotting``'s functions, when a picture is drawn.  No
decoder, no storage client, no torch (tests/project/test_layers.py checks it): decoding foreign media that both
sides read lives in ``speechpack.media``.
"""
