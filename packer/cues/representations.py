"""The representation modules by name (``schemas.cues.REPRESENTATIONS`` values); see ``packer.cues.payload`` for
what each module provides."""

from __future__ import annotations

from speechpack.packer.cues import muse_frontend, spk_embedding, waveform
from speechpack.packer.cues import arrays as fields
from speechpack.packer.cues import media as raw_video
from speechpack.packer.cues import phonemes as dae_keyword_phoneme

MODULES = {
    "waveform": waveform,
    "spk_embedding": spk_embedding,
    "raw_video": raw_video,
    "muse_frontend": muse_frontend,
    "fields": fields,
    "dae_keyword_phoneme": dae_keyword_phoneme,
}
