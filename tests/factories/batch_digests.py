"""One digest of everything a loader deals: every field of every batch, by type, dtype, shape and bytes, over a
number of epochs (the golden batches pin these digests; other tests compare two configurations' digests)."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from speechpack.loader import build_loader


def _feed(h, value) -> None:
    """Hash one field value by type, dtype, shape and bytes (arrays), or by its repr (the rest)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        h.update(f"array {value.dtype.str} {value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        h.update(b"dict")
        for key in sorted(value):
            h.update(repr(key).encode())
            _feed(h, value[key])
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__} {len(value)}".encode())
        for item in value:
            _feed(h, item)
    else:
        h.update(f"{type(value).__name__} {value!r}".encode())


def batches_digest(config: dict, state: str, workers: int, seed: int, epochs: int) -> str:
    """The digest of ``epochs`` epochs of ``config``'s loader for ``state``, with ``workers`` workers."""
    loader = build_loader(config, state, seed=seed, num_workers=workers)
    h = hashlib.sha256()
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        count = 0
        for batch in loader:
            h.update(f"epoch {epoch} batch {count}".encode())
            for key in sorted(batch):
                h.update(key.encode())
                _feed(h, batch[key])
            count += 1
        assert count > 0, f"{state}: epoch {epoch} holds no batch"
    return h.hexdigest()
