"""From packs to batches.  ``open_pack`` is the read path that training code and the tools share."""

from loader.pack import Pack, Sample, open_pack

__all__ = ["Pack", "Sample", "open_pack"]
