"""Target speaker extraction (``task: tse``): WeSep's data pipeline over tse and sources packs.

``args``, ``mix_args`` and ``ranges`` (``dataset_args`` and their ranges), ``mainline`` (mainline WeSep's recipe
dialect and batch), ``items`` (the item universe and the batches the loader would refuse), ``task`` (the builder),
pre-mixed batches as one window table (``table``, ``windows``, ``decode``: reading and collating), online mixing
(``online``,
``mixing``), augmentation (``augment``, ``room_sim``, ``convolve``; where training runs:
``batch_records`` and ``batch_augment``), reused memory (``buffers``) and speaker cues at batch time (``cues/``).
"""
