"""``speechpack inspect PACK``: what a pack holds, in figures a person can judge at a glance.

``validate`` answers "is this pack intact?"; ``inspect`` answers "is it the data I meant?": how many hours, how
they spread over speakers (a corpus where three speakers hold half the hours trains a different model), how long
the samples are and how loud, which speaker cues cover which speakers, how big the shards came out.  Everything
is read through :func:`loader.pack.open_pack`'s numpy columns (no ``index.json``, no audio), so it takes about a
second on a million samples; only an ``asd`` pack's ``labels`` stream (one byte per video frame) is read, for the
speaking fraction.

Every kind is covered: audio streams report levels, data streams (faces, labels, text) their rows and bytes, and
the per-kind figures are added where a kind has them (``asr``: hours per corpus and language, transcript lengths,
character vocabulary; ``asd``: clips, frame rates, face frames, speaking fraction).

``speechpack inspect --plot`` draws the figures as one PNG of six panels (matplotlib, the ``plot`` extra, imported only then),
eight when the pack has cues: which share of its speakers and speaker slots each cue covers, and how many
speakers have 0, 1, 2 ... enrollments (entries).

Drawn to be read at a glance on any pack, from the demo's 18 samples to a corpus of thousands of speakers:
counts (samples, speakers, shards) get whole-number ticks; speaker time is shown in the unit its size reads best
in (seconds for the demo, hours for a corpus) with few enough ticks that their labels never run together; speaker
names longer than the panel allows are shortened, the full names staying in ``inspect``'s text and JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from speechpack.loader.pack import Pack, SegmentTable, open_pack
from speechpack.schemas.constants import AUDIO_DTYPE, KIND_ASD, KIND_ASR, STREAM_LABELS, STREAM_TEXT, STREAM_TYPES
from speechpack.schemas.cues import lookup_key
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.plotting import duration_text, duration_unit, fitted_edges, integer_axis, pyplot, save_figure
from speechpack.schemas.units import format_bytes, plural

#: Percentiles every distribution reports.
PERCENTILES = (0, 5, 50, 95, 100)
#: Histogram bins of a distribution (text and JSON); plots use the same edges.
HISTOGRAM_BINS = 12
#: Level histograms span this dBFS range in 3 dB bins; quieter segments are counted in the first bin (digital
#: silence is -inf).
LEVEL_RANGE_DBFS = (-90.0, 0.0)
LEVEL_BINS = 30
#: Width in characters of the longest bar of a text histogram.
_BAR_WIDTH = 40


def distribution(values: np.ndarray, value_range: tuple[float, float] | None = None,
                 bins: int = HISTOGRAM_BINS) -> dict:
    """Count, mean, percentiles and a histogram of ``values`` (JSON-ready).  With ``value_range``, values outside
    it are counted in the first or last bin, so every value is in the histogram."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return {"count": 0}
    if value_range is not None:
        values = np.clip(values, *value_range)
    low, high = value_range or (float(values.min()), float(values.max()))
    if high > low:
        counts, edges = np.histogram(values, bins=bins, range=(low, high))
    else:  # every value the same: one bin holding them all
        counts, edges = np.array([values.size]), np.array([low, high])
    result = {"count": int(values.size), "mean": float(values.mean()), "total": float(values.sum())}
    result.update({f"p{p}": float(v) for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES))})
    result["histogram"] = {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}
    return result


def dbfs(values: np.ndarray) -> np.ndarray:
    """Decoded linear level (1.0 = full scale) to dBFS; zero becomes -inf."""
    with np.errstate(divide="ignore"):
        return 20.0 * np.log10(np.asarray(values, dtype=np.float64))


@dataclass
class InspectReport:
    """Every figure of one pack (``figures``, JSON-ready) plus the arrays the plot draws."""

    figures: dict
    durations: np.ndarray
    speaker_hours: np.ndarray
    levels_dbfs: dict[str, np.ndarray] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(self.figures, indent=1, sort_keys=True, ensure_ascii=False)

    def describe(self) -> str:
        return "\n".join(_describe(self.figures))

    def plot(self, path: str) -> None:
        """Durations, levels, speakers and shard sizes as one PNG (:func:`plot_inspect`; needs the ``plot``
        extra: matplotlib)."""
        plot_inspect(self, path)


def inspect_pack(path: str, top: int = 10) -> InspectReport:
    """Figures of the pack at ``path``: ``top`` speakers are listed by hours."""
    if top < 1:
        raise SpeechpackError(f"top must be at least 1, got {top}")
    pack = open_pack(path)
    durations = pack.duration
    speaker_ids, speaker_hours, speaker_samples = _hours_per_speaker(pack, durations)
    order = np.lexsort((speaker_ids, -speaker_hours))[:top]
    manifest = pack.manifest
    figures = {
        "pack": {"path": pack.path, "kind": pack.kind, "format": f"{manifest.format_version}.{manifest.format_minor}",
                 "sample_rate": pack.sample_rate, "samples": len(pack), "hours": float(durations.sum() / 3600.0),
                 "bytes": int(manifest.totals["bytes"]), "skipped": int(manifest.skipped["count"])},
        "durations_s": distribution(durations),
        "speakers": {
            "count": len(speaker_ids),
            "top": [{"speaker": speaker_ids[i], "hours": float(speaker_hours[i]), "samples": int(speaker_samples[i])}
                    for i in order],
            "hours_per_speaker": distribution(speaker_hours),
            "share_of_top": float(speaker_hours[order].sum() / speaker_hours.sum()) if speaker_hours.sum() else 0.0,
        },
        "streams": _stream_figures(pack),
        "levels": {},
        "shards": _shard_figures(pack),
    }
    levels = {}
    for name, table in pack.streams.items():
        if isinstance(table, SegmentTable):
            rms, peak = dbfs(table.rms), dbfs(table.peak)
            levels[name] = rms
            figures["levels"][name] = {"rms_dbfs": distribution(rms, LEVEL_RANGE_DBFS, LEVEL_BINS),
                                       "peak_dbfs": distribution(peak, LEVEL_RANGE_DBFS, LEVEL_BINS),
                                       "silent_segments": int(np.count_nonzero(table.rms == 0)),
                                       "rescaled_segments": int(np.count_nonzero(table.scale != 1.0))}
    if pack.cues:
        figures["cues"] = _cue_figures(pack)
    kind_figures = _KIND_FIGURES.get(pack.kind)
    if kind_figures is not None:
        figures[pack.kind] = kind_figures(pack, durations)
    return InspectReport(figures=figures, durations=durations, speaker_hours=speaker_hours, levels_dbfs=levels)


def _hours_per_speaker(pack: Pack, durations: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Each speaker's hours: a sample's duration counts once for every speaker in it (a target's hours)."""
    slots = pack.speakers.raw
    if slots.size == 0:
        return [], np.zeros(0), np.zeros(0, dtype=np.int64)
    unique, inverse = np.unique(slots, return_inverse=True)
    per_slot = np.repeat(durations, pack.speaker_count)
    hours = np.bincount(inverse, weights=per_slot, minlength=len(unique)) / 3600.0
    samples = np.bincount(inverse, minlength=len(unique))
    return [s.decode("utf-8") for s in unique], hours, samples


def _stream_figures(pack: Pack) -> dict:
    """Per stream: bytes on disk (from the manifest), segments, and rows (data streams) or stored samples; an audio
    stream also its codec, bytes per hour of the pack's audio and its bytes against pcm16's (format 1.4: what a
    codec saves)."""
    figures = {}
    hours = float(pack.duration.sum() / 3600.0)
    for spec in pack.manifest.streams:
        table = pack.streams[spec.name]
        size = sum(shard.files[spec.file].size for shard in pack.manifest.shards if spec.file in shard.files)
        entry = {"bytes": int(size), "segments": int(len(table.offset)), "dtype": spec.dtype,
                 "row_shape": list(spec.row_shape)}
        if STREAM_TYPES[spec.name].audio:
            entry["stored_samples"] = int(np.sum(table.channels.astype(np.int64) * table.length))
            entry["channels"] = {str(c): int(n) for c, n in zip(*np.unique(table.channels, return_counts=True))}
            entry["codec"] = spec.codec_name
            if spec.block_frames is not None:
                entry["block_frames"] = spec.block_frames
            entry["bytes_per_hour"] = float(size / hours) if hours else 0.0
            pcm16 = entry["stored_samples"] * AUDIO_DTYPE.itemsize
            entry["of_pcm16"] = float(size / pcm16) if pcm16 else 0.0
        else:
            entry["rows"] = int(table.length.sum())
        figures[spec.name] = entry
    return figures


def _shard_figures(pack: Pack) -> dict:
    shards = pack.manifest.shards
    sizes = np.array([sum(e.size for e in shard.files.values()) for shard in shards], dtype=np.int64)
    samples = np.array([shard.samples for shard in shards], dtype=np.int64)
    return {"count": len(shards), "bytes": distribution(sizes), "samples": distribution(samples),
            "list": [{"directory": s.directory, "samples": int(n), "bytes": int(b)}
                     for s, n, b in zip(shards, samples, sizes)]}


def _cue_figures(pack: Pack) -> dict:
    """Per cue: its bank (an audio bank's codec too), and how many of the pack's speakers and speaker slots find an
    entry in it."""
    slot_speakers = pack.speakers.raw
    unique_speakers = np.unique(slot_speakers)
    figures = {}
    for name, bank in sorted(pack.cues.items()):
        if bank.spec.policy_key == "spk_id":
            speaker_has = np.isin(unique_speakers, bank.keys)
            slot_has = np.isin(slot_speakers, bank.keys)
            entries, per = bank.entries_of(unique_speakers), "speaker"
        else:  # mix_spk_id: "<key>::<speaker>" per slot; a speaker is covered when any of its slots is
            sample_keys = np.repeat(pack.keys.raw, pack.speaker_count)
            lookups = np.array([lookup_key(bank.spec.policy_key, k.decode("utf-8"), s.decode("utf-8")).encode("utf-8")
                                for k, s in zip(sample_keys, slot_speakers)])
            slot_has = np.isin(lookups, bank.keys) if len(lookups) else np.zeros(0, dtype=bool)
            speaker_has = np.isin(unique_speakers, slot_speakers[slot_has])
            entries, per = bank.entries_of(lookups), "slot"
        counts, how_many = np.unique(entries, return_counts=True)
        figures[name] = {"representation": bank.representation, "policy_key": bank.spec.policy_key,
                         **({"codec": bank.codec} if bank.spec.representation_spec.codec_arrays else {}),  # audio banks
                         "keys": int(len(bank.keys)), "items": int(bank.num_items),
                         "speakers_covered": int(speaker_has.sum()), "speakers": int(len(unique_speakers)),
                         "slots_covered": int(slot_has.sum()), "slots": int(len(slot_speakers)),
                         # how many of the pack's speakers (spk_id) or slots (mix_spk_id) have n entries each
                         "entries_per": per,
                         "entries": {str(int(n)): int(c) for n, c in zip(counts, how_many)}}
    return figures


def _asr_figures(pack: Pack, durations: np.ndarray) -> dict:
    languages = np.asarray(pack.attrs["language"].raw)
    unique, inverse = np.unique(languages, return_inverse=True)
    hours = np.bincount(inverse, weights=durations, minlength=len(unique)) / 3600.0
    text = pack.streams[STREAM_TEXT]
    text_bytes = text.length[text.first]
    seconds = np.maximum(durations, 1e-9)
    chars = pack.manifest.char_counts or {}
    return {"hours_by_corpus": pack.manifest.hours_by_corpus,
            "hours_by_language": {lang.decode("utf-8"): float(h) for lang, h in zip(unique, hours)},
            "text_bytes": distribution(text_bytes),
            "text_bytes_per_second": distribution(text_bytes / seconds),
            "characters": {"distinct": len(chars), "total": int(sum(chars.values()))}}


def _asd_figures(pack: Pack, durations: np.ndarray) -> dict:
    clips = np.asarray(pack.attrs["clip"].raw)
    _unique, tracks_per_clip = np.unique(clips, return_counts=True)
    fps, fps_count = np.unique(pack.attrs["source_fps"], return_counts=True)
    labels = pack.streams[STREAM_LABELS]
    speaking = frames = 0
    for shard in np.unique(labels.shard):
        array = pack.stream_array(int(shard), STREAM_LABELS)
        speaking += int(np.count_nonzero(array))
        frames += int(array.shape[0])
    return {"clips": int(len(tracks_per_clip)), "tracks_per_clip": distribution(tracks_per_clip),
            "source_fps": {f"{f:g}": int(n) for f, n in zip(fps, fps_count)},
            "track_frames": distribution(labels.length[labels.first]),
            "speaking_fraction": speaking / frames if frames else 0.0}


#: The figures only one kind has (``asr``: corpora, transcripts, characters; ``asd``: clips, frame rates,
#: speaking fraction), under the kind's name: ``figures(pack, durations) -> dict``.
_KIND_FIGURES = {KIND_ASR: _asr_figures, KIND_ASD: _asd_figures}


def _percentile_text(dist: dict, unit: str = "", fmt="{:.2f}") -> str:
    """``p0 .. p100`` of a distribution; ``fmt`` is a format string or a function of the value."""
    if not dist.get("count"):
        return "none"
    show = fmt if callable(fmt) else fmt.format
    parts = [f"p{p} {show(dist[f'p{p}'])}" for p in PERCENTILES]
    return "  ".join(parts) + (f" {unit}" if unit else "")


def _histogram_text(dist: dict, fmt: str = "{:8.2f}") -> list[str]:
    if not dist.get("count"):
        return []
    edges, counts = dist["histogram"]["edges"], dist["histogram"]["counts"]
    used = [i for i, count in enumerate(counts) if count]  # empty bins at either end are left out
    peak = max(counts)
    return [f"    {fmt.format(edges[i])} - {fmt.format(edges[i + 1])} {counts[i]:>8} "
            f"{'#' * round(counts[i] / peak * _BAR_WIDTH)}" for i in range(used[0], used[-1] + 1)]


def _describe(f: dict) -> list[str]:
    p = f["pack"]
    lines = [f"{p['path']}: {p['kind']} pack, format {p['format']}, {p['sample_rate']} Hz",
             f"  {plural(p['samples'], 'sample')}, {p['hours']:.3f} h, {format_bytes(p['bytes'])}"
             + (f", {p['skipped']} input line(s) skipped" if p["skipped"] else ""),
             f"  duration s    {_percentile_text(f['durations_s'])}"]
    lines += _histogram_text(f["durations_s"])
    spk = f["speakers"]
    per_speaker = _percentile_text(spk["hours_per_speaker"], "h", "{:.3f}")
    lines.append(f"  speakers: {spk['count']}; hours per speaker {per_speaker}")
    shown = spk["top"]
    top = "the one speaker holds" if len(shown) == 1 else f"top {len(shown)} speakers hold"
    lines.append(f"  {top} {spk['share_of_top'] * 100:.1f} % of the speaker hours:")
    lines += [f"    {s['speaker']:<32} {s['hours']:9.3f} h {plural(s['samples'], 'sample'):>15}" for s in shown]
    for name, levels in f["levels"].items():
        lines.append(f"  {name:<8} rms dBFS  {_percentile_text(levels['rms_dbfs'], fmt='{:.1f}')}")
        lines += _histogram_text(levels["rms_dbfs"], fmt="{:6.1f}")
        lines.append(f"  {name:<8} peak dBFS {_percentile_text(levels['peak_dbfs'], fmt='{:.1f}')}"
                     f"  (silent {levels['silent_segments']}, rescaled {levels['rescaled_segments']})")
    for name, s in f["streams"].items():
        if "rows" not in s:
            rows = (f"{s['stored_samples']} stored samples, {s['codec']}: {format_bytes(s['bytes_per_hour'])} per "
                    f"hour ({s['of_pcm16']:.2f}x pcm16)")
        else:
            rows = f"{s['rows']} rows" + (f" of {s['row_shape']}" if s["row_shape"] else f" ({s['dtype']})")
        lines.append(f"  stream {name:<8} {format_bytes(s['bytes']):>10}, {s['segments']} segments, {rows}")
    sh = f["shards"]
    lines.append(f"  shards: {sh['count']}; size {_percentile_text(sh['bytes'], fmt=format_bytes)}; "
                 f"samples {_percentile_text(sh['samples'], fmt='{:.0f}')}")
    for name, c in f.get("cues", {}).items():
        stored = f", {c['codec']}" if c.get("codec", "pcm16") != "pcm16" else ""  # pcm16 banks: the text as before
        lines.append(f"  cue {name}: {c['representation']} by {c['policy_key']}, {c['items']} items{stored}; speakers "
                     f"{c['speakers_covered']}/{c['speakers']}, slots {c['slots_covered']}/{c['slots']}")
    if "asr" in f:
        a = f["asr"]
        for corpus, by_language in sorted((a["hours_by_corpus"] or {}).items()):
            langs = ", ".join(f"{lang} {h:.3f} h" for lang, h in sorted(by_language.items()))
            lines.append(f"  corpus {corpus}: {langs}")
        lines.append(f"  transcript bytes {_percentile_text(a['text_bytes'], fmt='{:.0f}')}; bytes/s "
                     f"{_percentile_text(a['text_bytes_per_second'], fmt='{:.1f}')}")
        lines.append(f"  characters: {a['characters']['distinct']} distinct, {a['characters']['total']} in all")
    if "asd" in f:
        a = f["asd"]
        fps = ", ".join(f"{rate} fps x{n}" for rate, n in a["source_fps"].items())
        lines.append(f"  clips: {a['clips']}; tracks per clip {_percentile_text(a['tracks_per_clip'], fmt='{:.0f}')}")
        lines.append(f"  track frames {_percentile_text(a['track_frames'], fmt='{:.0f}')}; {fps}")
        lines.append(f"  speaking fraction of face frames: {a['speaking_fraction'] * 100:.1f} %")
    return lines


#: Longest speaker name drawn whole on the "top speakers" axis; longer ones keep their start and end.
SPEAKER_LABEL_CHARS = 24
#: Up to this many shards, each one's bar gets its number.
LABELLED_SHARDS = 16
#: Most ticks on a duration axis: enough to read, few enough that labels such as "0.0035" keep apart.
DURATION_TICKS = 4
#: Bins of the level panel, over the range the levels span, and the dB of margin either side.
LEVEL_BINS, LEVEL_MARGIN_DB = 24, 1.0


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


def plot_inspect(report: InspectReport, path: str) -> None:
    """Durations, levels, top speakers, time per speaker, shard sizes and a kind's own panel, to the PNG ``path``."""
    save_figure(inspect_figure(report), path, "inspect --plot")


def inspect_figure(report: InspectReport):
    """The matplotlib figure of ``report``'s six panels (the caller saves and closes it)."""
    plt = pyplot("inspect --plot")
    from matplotlib.ticker import MaxNLocator
    f = report.figures
    cues = f.get("cues") or {}
    if cues:  # two more panels: which speakers and slots each cue covers, and how many entries they have
        fig, axes = plt.subplots(2, 4, figsize=(20, 8))
        (dur, lev, spk, cover), (dist, shard, extra, entries) = axes
        _cue_panels(cover, entries, cues)
    else:
        fig, axes = plt.subplots(2, 3, figsize=(15, 8))
        (dur, lev, spk), (dist, shard, extra) = axes
    dur.hist(report.durations, bins=_edges(f["durations_s"], report.durations))
    dur.set(xlabel="duration, s", ylabel="samples", title="durations")
    integer_axis(dur.yaxis)
    edges = fitted_edges(list(report.levels_dbfs.values()), LEVEL_BINS, LEVEL_MARGIN_DB, (-90.0, 0.0))
    for name, values in report.levels_dbfs.items():  # every value counted (a silent one at the lowest bin)
        lev.hist(np.clip(np.nan_to_num(values, neginf=edges[0]), edges[0], edges[-1]), bins=edges, alpha=0.6,
                 label=name)
    lev.set(xlabel="segment rms, dBFS", ylabel="segments", title="levels")
    integer_axis(lev.yaxis)
    if report.levels_dbfs:
        lev.legend()
    top = f["speakers"]["top"]
    who = "face track" if f["pack"]["kind"] == KIND_ASD else "speaker"  # an asd pack's "speakers" are its tracks
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
    fig.suptitle(f"{p['path']}: {p['kind']}, {plural(p['samples'], 'sample')}, {duration_text(3600.0 * p['hours'])}")
    fig.tight_layout()
    return fig


def _cue_panels(cover, entries, cues: dict) -> None:
    """Per cue, the share of the pack's speakers and speaker slots its bank covers (the counts written at the
    bars), and how many speakers (or slots, for a ``mix_spk_id`` cue) have 0, 1, 2 ... entries (enrollments):
    the bar at 0 is what a model would train without, drawn red."""
    names = list(cues)
    positions = np.arange(len(names))[::-1]
    height = 0.38
    speakers = [100 * c["speakers_covered"] / max(c["speakers"], 1) for c in cues.values()]
    slots = [100 * c["slots_covered"] / max(c["slots"], 1) for c in cues.values()]
    cover.barh(positions + height / 2, speakers, height, label="speakers")
    cover.barh(positions - height / 2, slots, height, label="speaker slots")
    for y, c, a, b in zip(positions, cues.values(), speakers, slots):
        cover.text(a + 1, y + height / 2, f"{c['speakers_covered']}/{c['speakers']}", va="center", fontsize="small")
        cover.text(b + 1, y - height / 2, f"{c['slots_covered']}/{c['slots']}", va="center", fontsize="small")
    cover.set_yticks(positions, [f"{n}\n({c['representation']}, {c['policy_key']})" for n, c in cues.items()])
    cover.set(xlim=(0, 118), xlabel="% covered (an entry in the cue's bank)", title="cue coverage")
    cover.legend(loc="lower right", fontsize="small")
    width = 0.8 / len(names)
    per = {c.get("entries_per", "speaker") for c in cues.values()}
    for i, (name, c) in enumerate(cues.items()):
        counts = {int(n): int(k) for n, k in c.get("entries", {}).items()}
        xs = np.asarray(sorted(counts), dtype=np.float64)
        offset = (i - (len(names) - 1) / 2) * width
        bars = entries.bar(xs + offset, [counts[int(x)] for x in xs], width * 0.95, label=name)
        for bar, x in zip(bars, xs):
            if x == 0:
                bar.set_color("tab:red")
    who = per.pop() if len(per) == 1 else "speaker or slot"
    entries.set(xlabel=f"entries (enrollments) per {who}", ylabel=f"{who}s",
                title=f"entries per {who} (red: none)")
    integer_axis(entries.xaxis)
    integer_axis(entries.yaxis)
    if len(names) > 1:
        entries.legend(fontsize="small")


__all__ = ["InspectReport", "distribution", "inspect_figure", "inspect_pack", "plot_inspect"]
