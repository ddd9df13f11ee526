"""Active speaker detection (``task: asd``): MuVAP's 25 Hz loader over ``asd`` packs.

One job per module: ``timeline`` (native frames <-> 25 Hz model frames, audio spans), ``chunks`` (MuVAP's training
chunks with history), ``augment`` (different-clip voice mixing, flip/crop/rotate), ``args`` (``dataset_args``),
``tracks`` (the item universe), ``batch`` (collation), ``task`` (the loader hook), ``datamodule`` (Lightning,
optional extra) and ``levels`` (level comparison across packs).  Nothing is imported here, so ``import
loader.asd.timeline`` never pulls torch, OpenCV or Lightning.
"""
