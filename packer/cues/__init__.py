"""Speaker cues at build time: ``cues.yaml`` and its resources packed into ``PACK/cues/`` (one bank per cue).

``banks`` (the two steps a build calls, one bank's files, the speaker labels, and ``WRITERS``: the writer of each
representation), ``resource`` (a resource JSON read into a bank's lookup structure, and the problems found),
``payload`` (``CueWriter``, what every writer is) and ``writers`` (the six writers, grouped by what they read:
media files FFmpeg decodes, numeric arrays, inline JSON).  The layout is specified in ``schemas/cue_banks.py``;
``loader/pack/cues.py`` reads it.
"""

from speechpack.packer.cues.banks import CueBuild, prepare_cues, write_cues
from speechpack.packer.cues.resource import CueProblem

__all__ = ["CueBuild", "CueProblem", "prepare_cues", "write_cues"]
