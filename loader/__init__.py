"""From packs to batches.

``open_pack`` (the reader floor, ``pack/``) is the read path the tools share (numpy only); ``build_loader`` is what
training code imports (it pulls in torch on first use, so ``import speechpack.loader`` stays light for packing and
validation).  The generic loader: ``config`` and ``recipe`` (what a config or a recipe asks; ``config_checks``:
shared value checks; ``config_keys``: each key declared once), ``tasks`` (the task registry and the builder protocol), ``rng`` (every counter-based
generator), ``resume`` (the resume state and its checks), ``plan/`` (the epoch plan), ``transport/`` (batches from
workers), ``cache/`` (packs by URL), ``memory_limit``, ``normalize``, ``samples`` (the one decode path),
``torch`` (the DataLoader glue), ``datamodule`` and ``stateful_loader`` (Lightning, torchdata), ``peek`` and
``demo``.  One package per task: ``tse/``, ``asd/``, ``asr/``.
"""

from speechpack.loader.pack import Pack, Sample, open_pack


def build_loader(config, state, *, rank=0, world_size=1, num_workers=None, seed=0, pin_memory=None,
                 prefetch_factor=None, batches_per_message=None, cache=None):
    """See :func:`speechpack.loader.torch.build_loader`."""
    from speechpack.loader.torch import build_loader as _build_loader

    return _build_loader(config, state, rank=rank, world_size=world_size, num_workers=num_workers, seed=seed,
                         pin_memory=pin_memory, prefetch_factor=prefetch_factor,
                         batches_per_message=batches_per_message, cache=cache)


__all__ = ["Pack", "Sample", "build_loader", "open_pack"]
