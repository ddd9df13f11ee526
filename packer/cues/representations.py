"""The representation modules by name (``schemas.cues.REPRESENTATIONS`` values); see ``packer.cues.payload`` for
what each module provides."""

from __future__ import annotations

from speechpack.packer.cues import dae_keyword_phoneme, fields, muse_frontend, raw_video, spk_embedding, waveform

MODULES = {
    "waveform": waveform,
    "spk_embedding": spk_embedding,
    "raw_video": raw_video,
    "muse_frontend": muse_frontend,
    "fields": fields,
    "dae_keyword_phoneme": dae_keyword_phoneme,
}
