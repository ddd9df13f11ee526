"""Speaker cues at build time: ``cues.yaml`` and its resources packed into ``PACK/cues/`` (one bank per cue).

One module per representation (``waveform``, ``spk_embedding``, ``raw_video``, ``muse_frontend``, ``fields``,
``dae_keyword_phoneme``), ``resource`` (resource JSON to lookup structure), ``bank`` (one bank's files),
``labels`` (spk2label), and ``build`` (the two steps a build calls).  The layout is specified in
``schemas/cues.py``; ``loader/tse/cues/bank.py`` reads it.
"""

from speechpack.packer.cues.build import CueBuild, prepare_cues, write_cues
from speechpack.packer.cues.problem import CueProblem

__all__ = ["CueBuild", "CueProblem", "prepare_cues", "write_cues"]
