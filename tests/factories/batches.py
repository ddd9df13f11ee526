"""Batches compared field by field, bit for bit: what the loader tests mean by "the same batches" (resumed, through
workers, through a ring, from a store, in one process or several).

A batch is a dict of fields; a torch tensor or a numpy array equals another of the same type, dtype and shape with
equal values (no tolerance: batches are bit-identical however they were made), anything else (keys, lists of
speakers) by ``==``.  ``field_differences`` says what differs, for a test that wants a bool or its own message
(``factories.delivery`` adds where a batch came from); ``assert_batches_equal`` asserts it over two lists of
batches.  torch is not imported here: a tensor can only come from a test that imported it.
"""

from __future__ import annotations

import sys

import numpy as np


def _value_difference(got, want) -> str | None:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"a {type(got).__name__}, not a tensor"
        if got.dtype != want.dtype:
            return f"dtype {got.dtype}, not {want.dtype}"
        return None if torch.equal(got, want) else "values differ"
    if isinstance(want, np.ndarray):
        if not isinstance(got, np.ndarray):
            return f"a {type(got).__name__}, not an ndarray"
        if got.dtype != want.dtype:
            return f"dtype {got.dtype}, not {want.dtype}"
        return None if np.array_equal(got, want) else "values differ"
    return None if got == want else "differs"


def field_differences(got: dict, want: dict) -> dict[str, str]:
    """The fields in which batch ``got`` differs from ``want``, each with how (``{}`` when they are the same), in
    ``want``'s order, then the fields only ``got`` has."""
    differences = {}
    for name, value in want.items():
        difference = "missing" if name not in got else _value_difference(got[name], value)
        if difference is not None:
            differences[name] = difference
    differences.update((name, "not expected") for name in got if name not in want)
    return differences


def assert_batches_equal(got: list[dict], expected: list[dict]) -> None:
    """As many batches as ``expected``, each the same as its counterpart (:func:`field_differences`)."""
    assert len(got) == len(expected), f"{len(got)} batches != {len(expected)}"
    for index, (a, b) in enumerate(zip(got, expected)):
        differences = field_differences(a, b)
        assert not differences, f"batch {index}: " + "; ".join(f"{k}: {v}" for k, v in differences.items())
