"""From sources to packs: adapters decode inputs (``adapters/``, ``audio/``, ``faces``), ``build/`` plans, writes
and commits packs on ``files`` and ``ownership`` (the floor every writer stands on), and the tools on top check
(``validate/``), describe (``inspect``), re-encode (``convert/``), copy (``copy/``), import (``importers/``) and
export (``export/``) them.
Speaker-cue banks are written at build time by ``cues/``; ``demo`` is ``speechpack demo``, on speech-like voices
that ``voices`` synthesises (numpy only, nothing to download)."""
