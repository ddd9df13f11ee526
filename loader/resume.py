"""The loader's resume state: what ``SpeechLoader.state_dict()`` holds, how a state is checked before anything
changes, and where a loader of another world size picks it up (docs/loader.md, "Resume").

A state is a few plain numbers (Grain's and MosaicML Streaming's loaders keep a small dict too): the epoch plan is a
pure function of (indexes, config, seed, epoch), so the position in it is all there is to save.  The position is
*global*: the epoch is one sequence of batches dealt round-robin to the ranks (``loader.plan.static_plan``), and after
``k`` steps on every rank of a pass that dealt from global batch ``s``, the batches ``s .. s + k * world_size - 1``
are consumed.  A loader of any world size and any ``num_workers`` continues from there
(``loader.plan.static_plan.resume_point``); only another config, other packs or another seed (the fingerprint and the
seed) are refused.

The keys (``STATE_VERSION`` 2)::

    state_version        2
    epoch                the epoch of the pass
    batches_consumed     this rank's steps in the pass
    world_size           the ranks the pass was dealt over
    global_start         the global batch the pass was dealt from: 0, unless it resumed a state of another world
                         size; below world_size
    seed, fingerprint    which loader the state belongs to (``loader.config.loader_fingerprint``)
    rank                 the saving rank, for information: every rank saves the same position

The global position is ``global_start + batches_consumed * world_size``; it is not stored as well, so a state
cannot contradict itself (torchdata's snapshots, which lag the batches handed out, move ``batches_consumed``
alone).  A version-1 state (before world sizes could change) is read with ``global_start`` 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

from speechpack.loader.config_checks import MAX_COUNT, MAX_EPOCH, ConfigError, integer
from speechpack.loader.plan.epoch_plan import MAX_WORLD_SIZE
from speechpack.schemas.errors import SpeechpackError

#: Version of ``SpeechLoader.state_dict()``; bump it when its meaning changes.
STATE_VERSION = 2
#: Versions a loader reads: 1 had no global position (its world size had to match; read as
#: ``batches_consumed * world_size``).
READABLE_VERSIONS = (1, 2)
#: Keys every state has.
_REQUIRED = ("state_version", "epoch", "batches_consumed", "seed", "world_size", "fingerprint")
#: The key a version-2 state adds.
GLOBAL_START_KEY = "global_start"


class ResumeError(SpeechpackError):
    """A loader state does not belong to this loader (different data, config or seed), or is malformed."""


@dataclass(frozen=True)
class Position:
    """Where a pass stands: its ``epoch``, the global batch it dealt from (``global_start``: 0 unless it resumed
    at another world size), the steps this rank took (``consumed``) and the ``world_size`` it is dealt over."""

    epoch: int
    global_start: int
    consumed: int
    world_size: int

    @property
    def global_batches(self) -> int:
        """The global batches consumed in the epoch, over all ranks."""
        return self.global_start + self.consumed * self.world_size


def make_state(position: Position, *, seed: int, rank: int, fingerprint: str) -> dict:
    """The state of a loader at ``position`` (the keys: module docstring)."""
    return {"state_version": STATE_VERSION, "epoch": position.epoch, "batches_consumed": position.consumed,
            "world_size": position.world_size, GLOBAL_START_KEY: position.global_start, "seed": seed, "rank": rank,
            "fingerprint": fingerprint}


def read_state(state, *, seed: int, fingerprint: str) -> Position:
    """The saved position of ``state``, after checking that it belongs to a loader with this ``seed`` and
    ``fingerprint`` and that every count is an integer in range (a float is refused, never truncated).  Any
    refusal is a ``ResumeError`` naming the key and, for a mismatch, both values."""
    if not isinstance(state, dict):
        raise ResumeError(f"loader state must be a dict (SpeechLoader.state_dict()), got {type(state).__name__}")
    missing = sorted(set(_REQUIRED) - set(state))
    if missing:
        raise ResumeError(f"loader state lacks {', '.join(missing)}")
    version = state["state_version"]
    if not any(_same(version, readable) for readable in READABLE_VERSIONS):
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise ResumeError(f"loader state does not match this loader: state_version in state: {version!r} / "
                          f"state_version in loader: {STATE_VERSION!r} (reads {readable})")
    for key, mine in (("seed", seed), ("fingerprint", fingerprint)):
        if not _same(state[key], mine):
            raise ResumeError(f"loader state does not match this loader: {key} in state: {state[key]!r} / "
                              f"{key} in loader: {mine!r}")
    epoch = _state_int(state, "epoch", MAX_EPOCH)
    consumed = _state_int(state, "batches_consumed", MAX_COUNT)
    world = _state_int(state, "world_size", MAX_WORLD_SIZE, low=1)
    if int(version) == 1:
        return Position(epoch, 0, consumed, world)
    if GLOBAL_START_KEY not in state:
        raise ResumeError(f"loader state lacks {GLOBAL_START_KEY}")
    return Position(epoch, _state_int(state, GLOBAL_START_KEY, world - 1), consumed, world)


def _same(value, mine) -> bool:
    """Whether a state's ``value`` is this loader's ``mine``: equal, and an integer where ``mine`` is one (never
    a bool or a float that happens to compare equal)."""
    if isinstance(mine, Integral):
        return isinstance(value, Integral) and not isinstance(value, bool) and int(value) == int(mine)
    return isinstance(value, type(mine)) and value == mine


def _state_int(state: dict, key: str, maximum: int, low: int = 0) -> int:
    """``state[key]`` as an int in ``[low, maximum]``, else a ``ResumeError`` naming the key."""
    try:
        return integer(state[key], f"loader state {key}", low, maximum)
    except ConfigError as err:
        raise ResumeError(str(err)) from None


__all__ = ["GLOBAL_START_KEY", "Position", "READABLE_VERSIONS", "ResumeError", "STATE_VERSION", "make_state",
           "read_state"]
