"""The pack directory a build writes into: made empty (or, for a build that continues another, checked to hold
only an unfinished build), and cleaned up when a build fails.

Only a pack's own files are ever deleted (``is_pack_entry``): a build pointed at the wrong directory stops instead
of removing someone's data.
"""

from __future__ import annotations

import os
import re
import shutil

from packer.build.state import PLAN_FILE, STATE_NAMES, has_state
from schemas.columns import COLUMNS_DIR
from schemas.constants import MANIFEST_NAME, SHARD_DIR_DIGITS, SHARD_DIR_PREFIX, SKIPPED_NAME, TEMP_PREFIX
from schemas.cues import CUES_DIR
from schemas.errors import SpeechpackError

_PACK_FILES = (MANIFEST_NAME, SKIPPED_NAME, COLUMNS_DIR, CUES_DIR)
_SHARD_NAME = re.compile(re.escape(SHARD_DIR_PREFIX) + r"\d{%d,}" % SHARD_DIR_DIGITS)


def is_pack_entry(name: str) -> bool:
    """Whether ``name`` is a file a pack writer makes (so ``--overwrite`` may delete it)."""
    return (name in _PACK_FILES or name in STATE_NAMES or name.startswith(f"{PLAN_FILE}.")
            or _SHARD_NAME.fullmatch(name) is not None
            or (name.startswith(TEMP_PREFIX) and is_pack_entry(name[len(TEMP_PREFIX):])))


def prepare_output(out: str, overwrite: bool, resuming: bool = False) -> bool:
    """Make ``out`` an empty directory, or with ``resuming`` one that holds at most an unfinished build; return
    whether it was created.

    A non-empty ``out`` is refused unless ``overwrite``; even then only a pack's own files are removed
    (``dataset.json`` first, so the old pack stops being a pack before its shards go).  A resumed build (or an
    array job) may find shards, temporary files and the build state; a finished pack without build state is not
    resumed (nothing is left to do, and its plan is unknown).
    """
    if not os.path.exists(out):
        os.makedirs(out, exist_ok=resuming)  # array jobs may race to create it
        return True
    if not os.path.isdir(out):
        raise SpeechpackError(f"{out}: exists and is not a directory")
    entries = sorted(os.listdir(out))
    if not entries:
        return False
    foreign = [name for name in entries if not is_pack_entry(name)]
    if foreign and (overwrite or resuming):
        raise SpeechpackError(f"{out}: holds files that are not part of a pack ({', '.join(foreign[:5])}); "
                              f"refusing to {'delete' if overwrite else 'build among'} them")
    if overwrite:
        remove_pack_entries(out)
        return False
    if not resuming:
        raise SpeechpackError(f"{out}: directory is not empty; pass --overwrite to replace the pack in it")
    if os.path.exists(os.path.join(out, MANIFEST_NAME)):
        if not has_state(out):
            raise SpeechpackError(f"{out}: already holds a finished pack (nothing to resume); pass --overwrite "
                                  f"to rebuild it")
        os.remove(os.path.join(out, MANIFEST_NAME))  # killed after committing: commit again
    return False


def remove_pack_entries(out: str) -> None:
    manifest = os.path.join(out, MANIFEST_NAME)
    if os.path.exists(manifest):
        os.remove(manifest)
    for name in sorted(os.listdir(out)):
        if is_pack_entry(name):
            path = os.path.join(out, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)


def discard_output(out: str, created: bool) -> None:
    """After a failed build: remove what it wrote (the directory too, if the build made it)."""
    if not os.path.isdir(out):
        return
    remove_pack_entries(out)
    if created and not os.listdir(out):
        os.rmdir(out)


__all__ = ["discard_output", "is_pack_entry", "prepare_output", "remove_pack_entries"]
