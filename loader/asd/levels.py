"""Source vs normalised audio levels of ASD packs, compared across packs (what ``speechpack validate`` shows).

MuVAP's advice (seed doc, "Validate every completed dataset"): large *source* level differences between corpora
are expected; large differences in the *normalised* RMS mean peak limiting, near-silence or malformed input.  So
per pack this reports percentiles (0, 1, 50, 95, 99, 100) of, per track:

- ``source_rms``, ``source_peak``: the stored audio's DC-free RMS and peak (the pack's statistics);
- ``gain_db``: MuVAP's gain (``loader.normalize.muvap_gain``) in dB;
- ``normalized_rms``, ``normalized_peak``: the levels the loader produces, ``gain * rms`` and ``gain * peak``;
- ``speaking_ratio``: the fraction of the track's native frames labelled speaking;

and how many tracks the gain's caps decided: ``peak_limited`` (the 0.99 peak cap, normalised RMS below target),
``gain_capped`` (the 20 dB cap: very quiet input) and ``silent`` (gain 1: no signal).

The normalised levels are computed from the statistics rather than by decoding every track through the loader:
the statistics are measured on the stored int16 exactly as the loader decodes it (and ``speechpack validate``
re-derives them from the files), and normalisation is ``(x - mean) * gain``, so ``gain * rms`` and ``gain *
peak`` ARE the output's RMS and peak.  Only the labels are read (one byte per frame).
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from speechpack.loader.normalize import NORMALIZE_MAX_GAIN_DB, NORMALIZE_PEAK_LIMIT, muvap_gain
from speechpack.loader.pack import Pack, open_pack
from speechpack.schemas.constants import KIND_ASD, STREAM_AUDIO, STREAM_LABELS
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.plotting import path_labels

#: Percentiles reported per metric (MuVAP's validate report uses the same).
PERCENTILES = (0, 1, 50, 95, 99, 100)
METRICS = ("source_rms", "source_peak", "gain_db", "normalized_rms", "normalized_peak", "speaking_ratio")
#: Gains below this are reported as this many dB (MuVAP's ``20 * log10(max(g, 1e-8))``).
_GAIN_FLOOR = 1e-8
#: Relative tolerance when deciding which cap set a gain.
_CAP_TOLERANCE = 1e-9


def track_levels(pack: Pack) -> dict[str, np.ndarray]:
    """Every metric of ``METRICS`` for every track of an asd pack, plus ``source_mean``."""
    if pack.kind != KIND_ASD:
        raise SpeechpackError(f"{pack.path}: level comparison reads asd packs; this one is {pack.kind}")
    audio = pack.streams[STREAM_AUDIO]
    segments = np.asarray(audio.first, dtype=np.int64)  # one mono audio segment per track
    rms = np.asarray(audio.rms, dtype=np.float64)[segments]
    peak = np.asarray(audio.peak, dtype=np.float64)[segments]
    mean = np.asarray(audio.mean, dtype=np.float64)[segments]
    gain = muvap_gain(rms, peak)
    return {"source_rms": rms, "source_peak": peak, "source_mean": mean,
            "gain_db": 20.0 * np.log10(np.maximum(gain, _GAIN_FLOOR)), "gain": gain,
            "normalized_rms": gain * rms, "normalized_peak": gain * peak,
            "speaking_ratio": speaking_ratio(pack)}


def speaking_ratio(pack: Pack) -> np.ndarray:
    """Mean label per track, from the labels stream (read shard by shard with one cumulative sum each)."""
    table = pack.streams[STREAM_LABELS]
    segments = np.asarray(table.first, dtype=np.int64)
    shard = np.asarray(table.shard[segments], dtype=np.int64)
    offset = np.asarray(table.offset[segments], dtype=np.int64)
    length = np.asarray(table.length[segments], dtype=np.int64)
    ratio = np.full(len(segments), np.nan)
    for s in np.unique(shard):
        mine = np.flatnonzero(shard == s)
        labels = pack.stream_array(int(s), STREAM_LABELS)
        csum = np.concatenate([[0], np.cumsum(labels, dtype=np.int64)])
        sums = csum[offset[mine] + length[mine]] - csum[offset[mine]]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio[mine] = np.where(length[mine] > 0, sums / np.maximum(length[mine], 1), np.nan)
    return ratio


def _percentiles(values: np.ndarray) -> dict[str, float | None]:
    finite = values[np.isfinite(values)]
    if not len(finite):
        return {str(p): None for p in PERCENTILES}
    return {str(p): float(v) for p, v in zip(PERCENTILES, np.percentile(finite, PERCENTILES))}


def pack_level_summary(pack: Pack) -> dict:
    """One pack's entry of the report (see the module docstring)."""
    levels = track_levels(pack)
    gain, rms, peak = levels["gain"], levels["source_rms"], levels["source_peak"]
    silent = gain == 1.0
    silent &= (rms <= 1e-8) | (peak <= 1e-8)
    peak_cap = NORMALIZE_PEAK_LIMIT / np.where(peak > 0, peak, 1.0)
    gain_cap = 10 ** (NORMALIZE_MAX_GAIN_DB / 20)
    peak_limited = ~silent & np.isclose(gain, peak_cap, rtol=_CAP_TOLERANCE, atol=0) & (gain < gain_cap)
    gain_capped = ~silent & np.isclose(gain, gain_cap, rtol=_CAP_TOLERANCE, atol=0)
    return {
        "path": pack.path,
        "samples": len(pack),
        "max_abs_source_mean": float(np.max(np.abs(levels["source_mean"]))) if len(pack) else None,
        "peak_limited": int(peak_limited.sum()),
        "gain_capped": int(gain_capped.sum()),
        "silent": int(silent.sum()),
        "levels": {metric: _percentiles(levels[metric]) for metric in METRICS},
    }


def asd_level_report(pack_paths: list[str]) -> dict:
    """The level comparison of ``pack_paths`` (asd packs): ``{"percentiles", "metrics", "packs": [...]}``, one
    entry per pack in the order given (JSON-ready)."""
    if not pack_paths:
        raise SpeechpackError("level comparison needs at least one asd pack")
    packs = [pack_level_summary(open_pack(path)) for path in pack_paths]
    return {"percentiles": list(PERCENTILES), "metrics": list(METRICS), "packs": packs}


def _cell(value: float | None, metric: str) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if metric == "gain_db":
        return f"{value:+.1f}"
    if metric == "speaking_ratio":
        return f"{value:.3f}"
    return f"{value:.4f}"


def format_level_table(report: dict) -> str:
    """The report as a text table: one block per metric, one row per pack (so packs line up for comparison)."""
    names = [entry["path"] for entry in report["packs"]]
    width = max([len("pack")] + [len(n) for n in names])
    header = f"{'metric':<16} {'pack':<{width}} " + " ".join(f"{'p' + str(p):>9}" for p in report["percentiles"])
    lines = [header, "-" * len(header)]
    for metric in report["metrics"]:
        for i, entry in enumerate(report["packs"]):
            cells = " ".join(f"{_cell(entry['levels'][metric][str(p)], metric):>9}" for p in report["percentiles"])
            lines.append(f"{metric if i == 0 else '':<16} {entry['path']:<{width}} {cells}")
    lines.append("")
    for entry in report["packs"]:
        lines.append(f"{entry['path']}: {entry['samples']} tracks; peak-limited {entry['peak_limited']}, "
                     f"gain-capped (20 dB) {entry['gain_capped']}, silent {entry['silent']}; "
                     f"max |source mean| {_cell(entry['max_abs_source_mean'], 'source_mean')}")
    return "\n".join(lines)


def compare_validated_levels(validation):
    """``speechpack validate``'s comparison: ``validation`` (a ``packer.validate.report.ValidationReport``) with
    ``asd_levels`` and their table filled in for its ``level_report_paths()``.  The comparison is what the loader's
    normalisation makes of each pack, so it is made here, never in packer/ (which reads packs but not the loader)."""
    levels = asd_level_report(validation.level_report_paths())
    return dataclasses.replace(validation, asd_levels=levels, asd_levels_table=format_level_table(levels))


def level_report_json(report: dict) -> str:
    """The report as JSON text (sorted keys, so reports diff cleanly)."""
    return json.dumps(report, indent=2, sort_keys=True)


def plot_validated_levels(report: dict | None, path: str) -> None:
    """``validate --plot``: the level report of the validated asd packs to a PNG; None (no valid asd pack among
    those validated) is an error rather than an empty plot."""
    if report is None:
        raise SpeechpackError("--plot compares asd packs' levels; no valid asd pack was given")
    plot_levels(report, path)


def plot_levels(report: dict, path: str) -> None:
    """One panel per metric, one column per pack: the p0-p100 range (thin), p1-p99 (thick) and the median (dot),
    to a PNG at ``path``.  Needs the ``plot`` extra (matplotlib)."""
    from speechpack.schemas.plotting import save_figure

    save_figure(levels_figure(report), path, "plotting levels")


def levels_figure(report: dict):
    """The matplotlib figure of ``plot_levels`` (the caller saves and closes it)."""
    from speechpack.schemas.plotting import pyplot

    plt = pyplot("plotting levels")
    metrics = report["metrics"]
    packs = report["packs"]
    labels = path_labels([entry["path"] for entry in packs])  # the packs' names, not 0, 1, ...
    cols = 3
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for x, entry in enumerate(packs):
            p = {k: (v if v is not None else np.nan) for k, v in entry["levels"][metric].items()}
            ax.vlines(x, p["0"], p["100"], color="0.6", linewidth=1)
            ax.vlines(x, p["1"], p["99"], color="C0", linewidth=5)
            ax.plot([x], [p["50"]], "o", color="C3")
        ax.set_title(metric)
        ax.set_xticks(range(len(packs)))
        rotated = max(map(len, labels)) > 12  # long names slant, so neighbours never overlap
        ax.set_xticklabels(labels, rotation=20 if rotated else 0, ha="right" if rotated else "center", fontsize="small")
        ax.set_xlim(-0.5, len(packs) - 0.5)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    fig.suptitle("ASD levels by pack (p0-p100 grey, p1-p99 blue, median red)", fontsize=9)
    fig.tight_layout()
    return fig


__all__ = ["METRICS", "PERCENTILES", "asd_level_report", "compare_validated_levels", "format_level_table",
           "level_report_json", "levels_figure", "pack_level_summary", "plot_levels",
           "plot_validated_levels", "speaking_ratio", "track_levels"]
