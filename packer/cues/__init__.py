"""Speaker cues at build time: ``cues.yaml`` and its resources packed into ``PACK/cues/`` (one bank per cue).

``build`` (the two steps a build calls), ``resource`` (a resource JSON read into a bank's lookup structure, and the
problems found), ``bank`` (one bank's files, the speaker labels, and ``WRITERS``: the writer of each
representation), ``payload`` (``CueWriter``, what every writer is), and the writers, grouped by what they read:
``media`` (``waveform``, ``raw_video``), ``arrays`` (``spk_embedding``, ``muse_frontend``, ``fields``) and
``phonemes`` (``dae_keyword_phoneme``).  The layout is specified in ``schemas/cue_banks.py``;
``loader/pack/cues.py`` reads it.
"""

from speechpack.packer.cues.build import CueBuild, prepare_cues, write_cues
from speechpack.packer.cues.resource import CueProblem

__all__ = ["CueBuild", "CueProblem", "prepare_cues", "write_cues"]
