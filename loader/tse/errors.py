"""The error of online mixing, in a module of its own so that every ``loader.tse`` module that raises it (the
mixer, the random streams, the augmentation sources) can import it without importing the others."""

from __future__ import annotations

from speechpack.schemas.errors import SpeechpackError


class MixError(SpeechpackError):
    """An online mixture cannot be made (no energy after every attempt, multichannel sources, a bad stream key)."""


__all__ = ["MixError"]
