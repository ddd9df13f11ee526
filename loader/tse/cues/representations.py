"""The reader side's representation modules by name (``schemas.cues.REPRESENTATIONS`` values), as
``packer.cues.representations`` is the writer side's.  Adding a representation: docs/extending.md.

Each module provides ``read(bank, item, data)`` (the item in WeSep's resource shape, from the bank's columns and
its mapped ``data.npy``), ``value(bank, spec, item, chunk, draws)`` (one row's cue: chunk-aligned, checked) and
optionally ``check_spec(spec, pack_path)`` (what makes a ``cues.yaml`` entry unusable, or None).
"""

from __future__ import annotations

from speechpack.loader.tse.cues import dae_keyword_phoneme, fields, muse_frontend, raw_video, spk_embedding, waveform

MODULES = {
    "waveform": waveform,
    "spk_embedding": spk_embedding,
    "raw_video": raw_video,
    "muse_frontend": muse_frontend,
    "fields": fields,
    "dae_keyword_phoneme": dae_keyword_phoneme,
}

__all__ = ["MODULES"]
