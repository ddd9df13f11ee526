"""Active speaker detection (``task: asd``): MuVAP's 25 Hz loader over ``asd`` packs.

One job per module: ``timeline`` (native frames <-> 25 Hz model frames, audio spans, MuVAP's training windows
with history), ``augment`` (different-clip voice mixing, flip/crop/rotate), ``args`` (``dataset_args``), ``task``
(the loader hook: the track index, the batch builder), ``datamodule`` (Lightning, optional extra) and ``levels``
(level comparison across packs).  Nothing is imported here, so ``import speechpack.loader.asd.timeline`` never
pulls torch, OpenCV or Lightning.
"""
