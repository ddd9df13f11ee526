"""The TSE task as a pipeline of stages, one operation per module (in the spirit of Grain's ``transformations/``):

- ``protocol``: what a stage takes and gives (``BatchState`` in, ``BatchState`` out; ``Stage``), and the order
  it runs in (``Pipeline``);
- ``pipeline``: the TSE stages in order (``STAGES``) and ``register_stage``, which adds one (with its config keys:
  ``keys``, the keys of added stages, which ``dataset_args`` reads while they are registered);
- ``windows``: the batch's window draws (pre-mixed);
- ``decode``: the block of batches gathered as one table and decoded (``loader.tse.table``), or item by item
  for packs resampled at load time; both through the one decode path, ``loader.samples``;
- ``online_mix``: mixtures made from sources packs (``loader.tse.online``), in place of the two above;
- ``noise``: offline noise over pre-mixed training mixtures;
- ``cues``: ``speaker_label`` and the used cues per row (enrollments augmented in training);
- ``collate``: the contract batch in WeSep's field order;
- ``mainline``: mainline WeSep's ``tse_collate_fn`` batch, from the contract's (a mainline recipe only).

Each stage draws from its own stream, declared in ``loader.rng`` (its table, "TSE stages").
"""
