"""``speechpack inspect --plot``: a pack's figures (``packer.inspect``) as one PNG of six panels.

Drawn to be read at a glance on any pack, from the demo's 18 samples to a corpus of thousands of speakers:
counts (samples, speakers, shards) get whole-number ticks; speaker time is shown in the unit its size reads best
in (seconds for the demo, hours for a corpus) with few enough ticks that their labels never run together; speaker
names longer than the panel allows are shortened, the full names staying in ``inspect``'s text and JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from speechpack.schemas.constants import KIND_ASD
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
#: Bins of the level panel, over the range the levels span (a fixed -90..0 dBFS axis squeezed them into a sliver).
LEVEL_BINS = 24
#: dB of margin either side of the levels drawn.
LEVEL_MARGIN_DB = 1.0


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


def level_edges(levels: list[np.ndarray]) -> np.ndarray:
    """Shared bin edges over the range the finite levels of every stream span (a silent segment's -inf left out),
    with a margin, so the panel shows the data, not the whole -90..0 dBFS scale the text histogram uses."""
    finite = [v[np.isfinite(v)] for v in levels]
    finite = [v for v in finite if v.size]
    if not finite:
        return np.linspace(-90.0, 0.0, LEVEL_BINS + 1)
    lo = float(min(v.min() for v in finite)) - LEVEL_MARGIN_DB
    hi = float(max(v.max() for v in finite)) + LEVEL_MARGIN_DB
    return np.linspace(lo, hi, LEVEL_BINS + 1)


def total_duration(hours: float) -> str:
    """A pack's total duration for a title, in the unit it reads best in (``18.6 seconds``, not ``0.01 h``)."""
    seconds = 3600.0 * hours
    unit, per_unit = duration_unit(seconds)
    return f"{seconds / per_unit:.3g} {unit}" if seconds / per_unit < 1000 else f"{seconds / per_unit:,.0f} {unit}"


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
    edges = level_edges([np.asarray(v, dtype=np.float64) for v in report.levels_dbfs.values()])
    for name, values in report.levels_dbfs.items():  # every value counted (a silent one at the lowest bin)
        lev.hist(np.clip(np.nan_to_num(values, neginf=edges[0]), edges[0], edges[-1]), bins=edges, alpha=0.6,
                 label=name)
    lev.set(xlabel="segment rms, dBFS", ylabel="segments", title="levels")
    integer_axis(lev.yaxis)
    if report.levels_dbfs:
        lev.legend()
    top = f["speakers"]["top"]
    # an asd pack's "speakers" are its face tracks (one per sample): named so, not taken for people
    who = "face track" if f["pack"]["kind"] == KIND_ASD else "speaker"
    seconds = 3600.0 * np.asarray(report.speaker_hours, dtype=np.float64)
    unit, per_unit = duration_unit(float(seconds.max()) if seconds.size else 0.0)
    spk.barh([_short(s["speaker"]) for s in top][::-1], [3600.0 * s["hours"] / per_unit for s in top][::-1])
    spk.set(xlabel=unit, title=f"top {len(top)} of {plural(f['speakers']['count'], who)}")
    spk.xaxis.set_major_locator(MaxNLocator(DURATION_TICKS))
    spk.tick_params(axis="y", labelsize="small" if len(top) > 10 else "medium")
    dist.hist(seconds / per_unit, bins=len(_edges(f["speakers"]["hours_per_speaker"], seconds)) - 1)
    dist.set(xlabel=f"{unit} per {who}", ylabel=f"{who}s", title=f"{unit} per {who}")
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
    fig.suptitle(f"{p['path']}: {p['kind']}, {plural(p['samples'], 'sample')}, {total_duration(p['hours'])}")
    fig.tight_layout()
    return fig


__all__ = ["inspect_figure", "level_edges", "plot_inspect", "total_duration"]
