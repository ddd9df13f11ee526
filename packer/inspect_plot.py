"""``speechpack inspect --plot``: a pack's figures (``packer.inspect``) as one PNG of six panels.

Drawn to be read at a glance on any pack, from the demo's 18 samples to a corpus of thousands of speakers:
counts (samples, speakers, shards) get whole-number ticks; speaker time is shown in the unit its size reads best
in (seconds for the demo, hours for a corpus) with few enough ticks that their labels never run together; speaker
names longer than the panel allows are shortened, the full names staying in ``inspect``'s text and JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from speechpack.schemas.plotting import duration_unit, integer_axis, pyplot, save_figure
from speechpack.schemas.units import plural

if TYPE_CHECKING:
    from speechpack.packer.inspect import InspectReport

#: Longest speaker name drawn whole on the "top speakers" axis; longer ones keep their start and end.
SPEAKER_LABEL_CHARS = 24
#: Up to this many shards, each one's bar gets its number.
LABELLED_SHARDS = 16
#: Most ticks on a duration axis: enough to read, few enough that labels such as "0.0035" keep apart.
DURATION_TICKS = 4


def _short(name: str) -> str:
    if len(name) <= SPEAKER_LABEL_CHARS:
        return name
    keep = (SPEAKER_LABEL_CHARS - 1) // 2
    return f"{name[:keep]}…{name[-keep:]}"


def _edges(dist: dict, values: np.ndarray) -> list[float]:
    """The bin edges ``inspect``'s text histogram of ``values`` used (``dist``), so picture and text agree."""
    if "histogram" in dist:
        return dist["histogram"]["edges"]
    return [float(values.min()), float(values.max())] if len(values) else [0.0, 1.0]


def plot_inspect(report: "InspectReport", path: str) -> None:
    """Durations, levels, top speakers, time per speaker, shard sizes and a kind's own panel, to the PNG ``path``."""
    save_figure(inspect_figure(report), path, "inspect --plot")


def inspect_figure(report: "InspectReport"):
    """The matplotlib figure of ``report``'s six panels (the caller saves and closes it)."""
    plt = pyplot("inspect --plot")
    from matplotlib.ticker import MaxNLocator
    f = report.figures
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    (dur, lev, spk), (dist, shard, extra) = axes
    dur.hist(report.durations, bins=_edges(f["durations_s"], report.durations))
    dur.set(xlabel="duration, s", ylabel="samples", title="durations")
    integer_axis(dur.yaxis)
    for name, values in report.levels_dbfs.items():
        edges = f["levels"][name]["rms_dbfs"]["histogram"]["edges"]  # every value counted, as in the text
        lev.hist(np.clip(values, edges[0], edges[-1]), bins=edges, alpha=0.6, label=name)
    lev.set(xlabel="segment rms, dBFS", ylabel="segments", title="levels")
    integer_axis(lev.yaxis)
    if report.levels_dbfs:
        lev.legend()
    top = f["speakers"]["top"]
    seconds = 3600.0 * np.asarray(report.speaker_hours, dtype=np.float64)
    unit, per_unit = duration_unit(float(seconds.max()) if seconds.size else 0.0)
    spk.barh([_short(s["speaker"]) for s in top][::-1], [3600.0 * s["hours"] / per_unit for s in top][::-1])
    spk.set(xlabel=unit, title=f"top {len(top)} of {plural(f['speakers']['count'], 'speaker')}")
    spk.xaxis.set_major_locator(MaxNLocator(DURATION_TICKS))
    spk.tick_params(axis="y", labelsize="small" if len(top) > 10 else "medium")
    dist.hist(seconds / per_unit, bins=len(_edges(f["speakers"]["hours_per_speaker"], seconds)) - 1)
    dist.set(xlabel=f"{unit} per speaker", ylabel="speakers", title=f"{unit} per speaker")
    dist.xaxis.set_major_locator(MaxNLocator(DURATION_TICKS))
    integer_axis(dist.yaxis)
    shards = f["shards"]["list"]
    shard.bar(range(len(shards)), [s["bytes"] / 1e6 for s in shards])
    shard.set(xlabel="shard", ylabel="MB", title=plural(len(shards), "shard"))
    if len(shards) <= LABELLED_SHARDS:  # every shard numbered (one shard alone would get ticks at -0.4 ... 0.4)
        shard.set_xticks(range(len(shards)))
    else:
        integer_axis(shard.xaxis)
    if "asr" in f and f["asr"]["hours_by_language"]:
        by_language = f["asr"]["hours_by_language"]
        extra.bar(list(by_language), list(by_language.values()))
        extra.set(ylabel="hours", title="hours per language")
    elif "asd" in f:
        extra.bar(list(f["asd"]["source_fps"]), list(f["asd"]["source_fps"].values()))
        extra.set(xlabel="source fps", ylabel="tracks", title="frame rates")
        integer_axis(extra.yaxis)
    else:
        streams = f["streams"]
        extra.bar(list(streams), [s["bytes"] / 1e6 for s in streams.values()])
        extra.set(ylabel="MB", title="bytes per stream")
    p = f["pack"]
    fig.suptitle(f"{p['path']}: {p['kind']}, {plural(p['samples'], 'sample')}, {p['hours']:.2f} h")
    fig.tight_layout()
    return fig


__all__ = ["inspect_figure", "plot_inspect"]
