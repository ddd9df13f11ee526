"""The config keys of the stages added with ``register_stage(..., keys=...)``: each a ``loader.config_keys.Key``,
declared once, in the stage's own module.  While the stage is registered, TSE's ``dataset_args`` reads its keys
(``loader.tse.args``: held in ``DatasetArgs.stage_args``): each is parsed, checked, defaulted, documented (a row of
``DATASET_ARGS.markdown()``) and fingerprinted by its role from that one declaration, and a stage reads its values
with ``DatasetArgs.stage_arg(name)``.

Kept apart from the pipeline (and as light as ``loader.config_keys``) so that parsing a config imports no stage.
"""

from __future__ import annotations

from typing import Any

from speechpack.loader.config_keys import ALWAYS, NEVER, WHEN_SET, Flat, Key, KeyTable

#: Stage name -> its keys, in registration order.
_KEYS: dict[str, tuple[Key, ...]] = {}


def add_stage_keys(stage: str, keys: tuple[Key, ...], taken: set[str]) -> None:
    """Declare ``stage`` 's config keys (``taken``: the names other keys already have); each is a plain key of the
    mapping (no ``Flat`` field, no built field)."""
    keys = tuple(keys)
    for key in keys:
        if not isinstance(key, Key) or not key.field or key.build is not None or isinstance(key.check, Flat):
            raise ValueError(f"register_stage {stage!r}: keys are plain loader.config_keys.Key declarations, got "
                             f"{key!r}")
    names = [key.name for key in keys]
    clash = sorted((set(names) & (taken | {k.name for k in stage_keys()})) | {n for n in names if names.count(n) > 1})
    if clash:
        raise ValueError(f"register_stage {stage!r}: config key(s) {', '.join(clash)} declared already")
    if keys:
        _KEYS[stage] = keys


def remove_stage_keys(stage: str) -> None:
    _KEYS.pop(stage, None)


def stage_keys_of(stage: str) -> tuple[Key, ...]:
    """The keys ``stage`` was registered with (none for a built-in stage: its keys are ``DATASET_ARGS`` 's)."""
    return _KEYS.get(stage, ())


def stage_keys() -> tuple[Key, ...]:
    """Every registered stage's keys, in registration order."""
    return tuple(key for keys in _KEYS.values() for key in keys)


def stage_table() -> KeyTable:
    return KeyTable(stage_keys())


def stage_key(name: str) -> Key | None:
    """The registered key ``name``, or None."""
    return next((key for key in stage_keys() if key.name == name), None)


def fingerprint_of(values: tuple[tuple[str, Any], ...]) -> dict:
    """The held stage keys ``values`` as the resume fingerprint hashes them: each by its role (a key no longer
    registered is hashed with its value)."""
    out = {}
    for name, value in values:
        key = stage_key(name)
        role = ALWAYS if key is None else key.fingerprint
        if key is not None and key.fingerprint_value is not None:
            value = key.fingerprint_value(value)
        if role == NEVER or (role == WHEN_SET and not value):
            continue
        out[name] = value
    return out


__all__ = ["add_stage_keys", "fingerprint_of", "remove_stage_keys", "stage_key", "stage_keys", "stage_keys_of",
           "stage_table"]
