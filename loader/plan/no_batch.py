"""Why a plan holds no batch, in the figures and the setting that emptied it: one wording for ``speechpack plan``,
``speechpack peek`` and the loader (a warning when it is built), so each names the counts and the key to change.

A plan is empty when there is nothing to deal (the packs hold no item, the filters removed them all, the weighting
selects none) or when what there is makes no whole round and the tail rule drops it: ``tail: drop``
(``dataloader_args.drop_last: true`` in a WeSep recipe) leaves out an incomplete last round of ``batch_size x
world_size`` items, and ``sync: drop`` (a task that evens ranks on its own) the batches that do not fill a step of
every rank.  Pure text from the plan's inputs: nothing here reads a pack.
"""

from __future__ import annotations

from typing import Any

from speechpack.schemas.units import plural


def no_batch_reason(args: Any, units: int, world_size: int, *, dropped: int, unit_name: str = "item",
                    filtered: int = 0, filter_report: dict | None = None, weighted: bool = False) -> str:
    """The counts and the setting that leave a plan of ``units`` planning units (``args``: the task's planning
    view, ``PlanArgs``) with no batch at ``world_size``; ``dropped`` units were left out by the tail rule,
    ``filtered`` items removed by the task's filters before planning (``filter_report``: per reason)."""
    counted = plural(units, unit_name)
    if units == 0:
        if filtered:
            reasons = ", ".join(f"{reason} {count}" for reason, count in (filter_report or {}).items())
            return (f"no {unit_name} left: the filters removed all {filtered}" + (f" ({reasons})" if reasons else "")
                    + "; widen them (filter_len_args)")
        return f"the packs hold no {unit_name}"
    if not dropped:
        if weighted:
            return (f"{counted}, of which the weighting selects none this epoch (packs entries' weight, repeat or "
                    f"choose)")
        return f"{counted}, world size {world_size}"
    tail = getattr(args, "tail", None)
    sync = getattr(args, "sync", None) or tail
    size = getattr(args, "batch_size", None)
    if getattr(args, "batching", None) is not None:
        return (f"{counted}, all {dropped} dropped: their budget batches make no step of world size {world_size} "
                f"(tail: drop{'' if sync == tail else f', sync: {sync}'}); lower the world size or set tail: pad")
    if tail == "drop":
        needed = f"batch_size {size} x world size {world_size}" if size else f"world size {world_size}"
        return (f"{counted}, all {dropped} dropped as an incomplete round (drop_last: true / tail: drop; a round "
                f"takes {needed}); lower the batch size or set drop_last: false (tail: pad)")
    return (f"{counted}, all {dropped} dropped: their batches make no step of world size {world_size} (sync: {sync}); "
            f"lower the world size or set sync: pad")


def no_batch_message(state: str, reason: str, *, epoch: int | None = None, where: str | None = None) -> str:
    """``reason`` as ``plan`` says it (``epoch`` given: "train: epoch 0 has no batch to train on: ..."), or as
    ``peek`` and the loader say it ("CONFIG: the val plan holds no batch: ...")."""
    if epoch is not None:
        return f"{state}: epoch {epoch} has no batch{' to train on' if state == 'train' else ''}: {reason}"
    return f"{where + ': ' if where else ''}the {state} plan holds no batch: {reason}"


__all__ = ["no_batch_message", "no_batch_reason"]
