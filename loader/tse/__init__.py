"""Target speaker extraction (``task: tse``): WeSep's data pipeline over tse and sources packs.

``args`` and ``mix_args`` (``dataset_args``; their ranges are ``loader.config_checks``), ``mainline`` (mainline
WeSep's recipe dialect and fbank), ``items`` (the item universe and the batches the loader would refuse), ``task``
(the builder), ``stages/`` (the batch as a pipeline of stages, one module each; audio decoded through
``loader.samples``), pre-mixed batches as one window table (``table``, ``windows``, ``decode``:
reading and collating), online mixing (``online``, ``mixing``), augmentation (``augment``, ``room_sim``,
``convolve``; where training runs: ``batch_records`` and ``batch_augment``), reused memory (``buffers``) and
speaker cues at batch time (``cues/``).
"""
