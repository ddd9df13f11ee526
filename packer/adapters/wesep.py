"""``speechpack build wesep`` on a WeSep raw list (``raw.list``/``samples.jsonl``): a ``tse`` pack from mixture
lines, a ``sources`` pack from single-speaker lines, with the split's cues (``--cues cues.yaml``).

The lines are read and each sample planned and decoded by ``packer.adapters.wesep_lines`` (WeSep's strict waveform
policy, shared with tar shards and mainline's lists); here the list becomes a pack: its relative paths checked
against where they are read from, its cue resources prepared (``packer.cues``), and the build run.
"""

from __future__ import annotations

import os

from speechpack.packer.adapters.wesep_lines import read_wesep_list, speaker_slots, wesep_steps
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.cues import prepare_cues
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.wesep_list import WesepLine


def _check_relative_paths(list_path: str, lines: list[WesepLine]) -> None:
    """Relative audio paths are read from the current directory, as WeSep reads them (its lists usually hold
    absolute paths, and a recipe run from its own directory may hold paths relative to it).  A list whose relative
    paths are missing from there but present beside the list was written relative to itself (the demo's lists
    are): say so, with the ``--root`` that reads it, before any audio is probed, rather than a "file not found" on
    every line."""
    relative = [p for parsed in lines for p in (*parsed.mix_paths, *parsed.target_paths)
                if isinstance(p, str) and not os.path.isabs(p)]
    missing = [p for p in relative if not os.path.exists(p)]
    if not missing:
        return
    beside = os.path.dirname(os.path.abspath(list_path))
    if not all(os.path.exists(os.path.join(beside, p)) for p in missing):
        return  # not a list relative to itself: each missing file is reported on its line
    shown = missing[0]
    raise SpeechpackError(
        f"{list_path}: {len(missing)} relative audio path(s) not found from the current directory "
        f"({os.getcwd()}; e.g. {shown} -> {os.path.abspath(shown)}), but found beside the list "
        f"({os.path.join(beside, shown)}): pass --root {os.path.relpath(beside)} (relative paths in a list are "
        f"read from the current directory, as WeSep reads them, or from --root)")


def build_wesep(list_path: str, options: BuildOptions, root: str | None = None, cues: str | None = None,
                allow_pickle: bool = False) -> BuildSummary:
    """``speechpack build wesep``: a WeSep raw list to a ``tse`` or ``sources`` pack.

    ``cues`` is the split's ``cues.yaml``: every resource it points to is packed into ``cues/`` (see
    ``packer.cues``), after checking that each guaranteed cue has a lookup key for every slot of the list.
    ``allow_pickle`` lets spatial resources that are pickled dicts be unpickled (only for files you trust).
    """
    if not os.path.isfile(list_path):
        raise SpeechpackError(f"{list_path}: list file not found")
    wesep_list = read_wesep_list(list_path, root)
    if not root:
        _check_relative_paths(list_path, wesep_list.lines)
    recorded = options.recorded()
    if root:
        recorded["root"] = os.path.abspath(root)
    cue_build = None
    if cues is not None:
        cue_build = prepare_cues(cues, list(speaker_slots(wesep_list.lines)), root, options.sample_rate, allow_pickle)
        recorded.update(cue_build.recorded())
    return run_build(
        cues=cue_build,
        items=wesep_list.lines,
        problems=wesep_list.problems,
        **wesep_steps(options.sample_rate),
        kind=wesep_list.kind,
        input_path=list_path,
        command="build wesep",
        recorded_options=recorded,
        options=options,
    )
