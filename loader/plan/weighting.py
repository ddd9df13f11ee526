"""Weighting across packs: how many items each pack gives an epoch, and which ones, as pure functions.

Three ways to set a pack's count per epoch (docs/loader.md "Weighting"):

- proportions (``weight`` on every entry, or ``hours_beta`` on every entry): pack ``p`` gets
  ``share_p * epoch_size`` items, rounded by largest remainder so the counts sum to ``epoch_size`` exactly;
  ``epoch_size`` is ``weighting.epoch_items`` or else the sum of the packs' natural sizes;
- ``hours_beta`` shares follow Omnilingual ASR: corpus ``c`` gets ``(hours_c / hours_total) ** beta_corpus``
  (normalised over corpora), language ``l`` within it ``(hours_cl / hours_c) ** beta_language`` (normalised
  within the corpus); packs of one (corpus, language) split its share by their hours (``hours_beta_weights``);
- absolute (MosaicML's ``repeat`` / ``choose``): ``floor(repeat * size + 0.5)`` or ``choose`` items; an entry without
  either gives its natural size; the epoch size is the sum.
- WeSep's ``sample_num_per_epoch: N`` (``LoaderConfig.sample_num_per_epoch``) with no weighted entry: the packs'
  natural proportions (their sizes) scaled to ``N`` items.

Which items: each pack is read as an endless stream of permutations of its items (cycle ``k`` is a permutation
keyed by (seed, pack, cycle), the identity without ``shuffle``), and epoch ``e`` takes positions
``[e * count, (e + 1) * count)`` of it.  So every item of a pack appears once before any repeats, a small
upweighted pack cycles, and a large downweighted pack is covered over several epochs.  ``epoch_items`` is a pure
function of (pack sizes, counts, seed, epoch): a resumed run recomputes it from the epoch alone.

ASR packs hold several corpora and languages each (``hours_by_corpus`` in ``dataset.json``); there the same
machinery runs over (corpus, language) groups instead of packs (``PackWeighting.from_groups``, used by
``loader.asr.task``): a group is read as a pack would be.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from speechpack.loader.config_checks import MAX_EPOCH_ITEMS, ConfigError
from speechpack.loader.rng import cycle_rng



def largest_remainder(shares: Sequence[float], total: int) -> np.ndarray:
    """Integer counts proportional to ``shares`` that sum to ``total`` exactly (Hamilton's method; ties go to the
    earlier entry)."""
    shares = np.asarray(shares, dtype=np.float64)
    if total < 0 or shares.ndim != 1 or np.any(shares < 0) or not np.isfinite(shares).all() or shares.sum() <= 0:
        raise ConfigError(f"weighting: need non-negative shares with a positive sum and total >= 0, got "
                          f"{shares.tolist()} and {total}")
    exact = shares / shares.sum() * total
    counts = np.floor(exact).astype(np.int64)
    left = total - int(counts.sum())
    if left:
        order = np.argsort(-(exact - counts), kind="stable")
        counts[order[:left]] += 1
    return counts


def hours_beta_weights(hours: Sequence[float], corpora: Sequence[str], languages: Sequence[str],
                       beta_corpus: float, beta_language: float) -> np.ndarray:
    """Per-entry shares (summing to 1) by Omnilingual ASR's two-level hours ** beta rule (module docstring).

    ``hours[i]``, ``corpora[i]``, ``languages[i]`` describe entry ``i``; a (corpus, language) group with several
    entries splits its share in proportion to their hours.  ``beta = 1`` keeps the natural proportions, ``beta = 0``
    makes them uniform (over corpora, then over the languages of a corpus).
    """
    hours = np.asarray(hours, dtype=np.float64)
    if not len(hours) == len(corpora) == len(languages):
        raise ConfigError("weighting: hours, corpora and languages must have one entry per pack")
    if len(hours) == 0 or np.any(hours <= 0) or not np.isfinite(hours).all():
        raise ConfigError(f"weighting: hours_beta needs packs with positive hours, got {hours.tolist()}")
    for name, beta in (("beta_corpus", beta_corpus), ("beta_language", beta_language)):
        if not beta >= 0:
            raise ConfigError(f"weighting.{name}: must be non-negative, got {beta}")
    total = hours.sum()
    corpus_hours: dict[str, float] = {}
    group_hours: dict[tuple[str, str], float] = {}
    for h, c, l in zip(hours, corpora, languages):
        corpus_hours[c] = corpus_hours.get(c, 0.0) + h
        group_hours[(c, l)] = group_hours.get((c, l), 0.0) + h
    corpus_w = {c: (h / total) ** beta_corpus for c, h in corpus_hours.items()}
    corpus_sum = sum(corpus_w.values())
    lang_w = {g: (h / corpus_hours[g[0]]) ** beta_language for g, h in group_hours.items()}
    lang_sum: dict[str, float] = {}
    for (c, _), w in lang_w.items():
        lang_sum[c] = lang_sum.get(c, 0.0) + w
    shares = np.array([corpus_w[c] / corpus_sum * lang_w[(c, l)] / lang_sum[c] * h / group_hours[(c, l)]
                       for h, c, l in zip(hours, corpora, languages)])
    return shares / shares.sum()


def pack_stream(size: int, seed: int, pack: int, start: int, stop: int, shuffle: bool) -> np.ndarray:
    """Positions ``[start, stop)`` of pack ``pack``'s endless stream of permutations of ``range(size)``."""
    if stop <= start:
        return np.zeros(0, dtype=np.int64)
    if size <= 0:
        raise ConfigError(f"weighting: pack {pack} has no items but is asked for {stop - start}")
    parts = []
    for cycle in range(start // size, (stop - 1) // size + 1):
        perm = _cycle_permutation(size, seed, pack, cycle) if shuffle else np.arange(size, dtype=np.int64)
        lo, hi = max(start - cycle * size, 0), min(stop - cycle * size, size)
        parts.append(perm[lo:hi])
    return np.concatenate(parts)


def _cycle_permutation(size: int, seed: int, pack: int, cycle: int) -> np.ndarray:
    """Cycle ``cycle`` of pack ``pack``: Philox keyed by the seed; the counter's top word has its high bit set, so
    these streams never meet ``loader.rng.batch_rng``'s (whose top word is the epoch)."""
    return cycle_rng(seed, pack, cycle).permutation(size).astype(np.int64)


def epoch_items(pack_sizes: Sequence[int], counts: Sequence[int], seed: int, epoch: int,
                shuffle: bool = True) -> np.ndarray:
    """The epoch's item ids (global: pack ``p``'s items are ``offset_p + range(size_p)``, packs in order),
    ``counts[p]`` from pack ``p``, grouped by pack (the plan shuffles them).  Pure function of its inputs."""
    if seed < 0 or epoch < 0:
        raise ConfigError(f"weighting: seed and epoch must be non-negative, got seed={seed}, epoch={epoch}")
    if len(pack_sizes) != len(counts):
        raise ConfigError("weighting: one count per pack is required")
    offsets = np.concatenate([[0], np.cumsum(pack_sizes, dtype=np.int64)])
    parts = [offsets[p] + pack_stream(int(size), seed, p, epoch * int(count), (epoch + 1) * int(count), shuffle)
             for p, (size, count) in enumerate(zip(pack_sizes, counts))]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def pack_counts(sizes: Sequence[int], *, weights: Sequence[float] | None = None,
                repeats: Sequence[float | None] | None = None, chooses: Sequence[int | None] | None = None,
                epoch_size: int | None = None) -> np.ndarray:
    """Items per pack per epoch: proportional (``weights``: shares of ``epoch_size``, default the sum of
    ``sizes``) or absolute (``repeats``/``chooses``, ``None`` entries meaning neither: the natural size)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if weights is not None:
        total = int(sizes.sum()) if epoch_size is None else int(epoch_size)
        counts = largest_remainder(weights, total)
        empty = (counts > 0) & (sizes == 0)
        if empty.any():
            raise ConfigError(f"weighting: pack(s) {np.flatnonzero(empty).tolist()} have no items but a positive "
                              f"weight")
        return counts
    repeats = repeats or [None] * len(sizes)
    chooses = chooses or [None] * len(sizes)
    counts = [c if c is not None else (int(np.floor(r * n + 0.5)) if r is not None else int(n))
              for n, r, c in zip(sizes, repeats, chooses)]
    if sum(counts) > MAX_EPOCH_ITEMS:
        raise ConfigError(f"packs: repeat/choose ask for {sum(counts)} items per epoch, more than {MAX_EPOCH_ITEMS}")
    counts = np.array(counts, dtype=np.int64)
    bad = (counts > 0) & (sizes == 0)
    if bad.any():
        raise ConfigError(f"weighting: pack(s) {np.flatnonzero(bad).tolist()} have no items but choose > 0")
    return counts


@dataclass(frozen=True)
class PackWeighting:
    """A loader's weighting, resolved against its packs: sizes, counts per epoch and the names to report by."""

    sizes: tuple[int, ...]
    counts: tuple[int, ...]
    targets: tuple[float, ...]  # the configured shares of the epoch (counts / epoch size for repeat/choose)
    paths: tuple[str, ...]
    corpora: tuple[str, ...]
    languages: tuple[str, ...]
    shuffle: bool

    @classmethod
    def resolve(cls, config, sizes: Sequence[int], hours: Sequence[float]) -> "PackWeighting":
        """``config``: the ``loader.config.LoaderConfig`` (its ``packs``, ``weighting``, ``sample_num_per_epoch`` and
        ``dataset_args.shuffle``; a task that weighs something else returns its own weighting, ``Prepared.weighting``);
        ``sizes``: items per pack after filtering; ``hours``: the packs' manifest ``totals.hours``."""
        packs, w = config.packs, config.weighting
        corpora = tuple(p.corpus_name for p in packs)
        languages = tuple(p.language_name for p in packs)
        if any(p.hours_beta for p in packs):
            shares = hours_beta_weights(hours, corpora, languages, w.beta_corpus, w.beta_language)
            counts = pack_counts(sizes, weights=shares, epoch_size=w.epoch_items)
        elif any(p.weight is not None for p in packs):
            weights = np.array([p.weight for p in packs], dtype=np.float64)
            shares = weights / weights.sum()
            counts = pack_counts(sizes, weights=shares, epoch_size=w.epoch_items)
        elif config.sample_num_per_epoch:  # WeSep's epoch size over unweighted packs: their natural proportions
            shares = np.asarray(sizes, dtype=np.float64) / max(sum(sizes), 1)
            counts = pack_counts(sizes, weights=shares, epoch_size=config.sample_num_per_epoch)
        else:
            counts = pack_counts(sizes, repeats=[p.repeat for p in packs], chooses=[p.choose for p in packs])
            if counts.sum() <= 0:
                raise ConfigError("packs: repeat/choose leave the epoch without items")
            shares = counts / counts.sum()
        return cls(sizes=tuple(int(n) for n in sizes), counts=tuple(int(c) for c in counts),
                   targets=tuple(float(x) for x in shares), paths=tuple(p.path for p in packs), corpora=corpora,
                   languages=languages, shuffle=config.dataset_args.shuffle)

    @classmethod
    def from_groups(cls, sizes: Sequence[int], hours: Sequence[float], corpora: Sequence[str],
                    languages: Sequence[str], beta_corpus: float, beta_language: float,
                    epoch_size: int | None = None, shuffle: bool = True) -> "PackWeighting":
        """Omnilingual's weighting over (corpus, language) groups rather than packs (ASR packs hold several).

        Group ``g`` plays the part of a pack: its items must be numbered contiguously, group after group
        (``sizes[g]`` items each, after filtering); ``hours[g]`` are its hours before filtering (the packs'
        ``hours_by_corpus``, what Omnilingual's stats TSV holds).  A group whose items were all filtered out keeps
        its place in the corpus shares but gets no items: its share goes to the others by largest remainder.
        """
        sizes = np.asarray(sizes, dtype=np.int64)
        shares = hours_beta_weights(hours, corpora, languages, beta_corpus, beta_language)
        usable = np.where(sizes > 0, shares, 0.0)
        if usable.sum() <= 0:
            raise ConfigError("weighting: every (corpus, language) group is empty after filtering")
        total = int(sizes.sum()) if epoch_size is None else int(epoch_size)
        counts = largest_remainder(usable, total)
        names = tuple(f"{c}/{l}" for c, l in zip(corpora, languages))
        return cls(sizes=tuple(int(n) for n in sizes), counts=tuple(int(c) for c in counts),
                   targets=tuple(float(x) for x in shares), paths=names, corpora=tuple(corpora),
                   languages=tuple(languages), shuffle=shuffle)

    def items(self, seed: int, epoch: int) -> np.ndarray:
        """The epoch's selected item ids (indices into the loader's item universe)."""
        return epoch_items(self.sizes, self.counts, seed, epoch, self.shuffle)

    def report(self, selected: np.ndarray) -> dict:
        """Realised items and shares of ``selected`` per pack (with its target), corpus and language."""
        offsets = np.concatenate([[0], np.cumsum(self.sizes)])
        per_pack = np.bincount(np.searchsorted(offsets, selected, side="right") - 1, minlength=len(self.sizes))
        total = max(int(per_pack.sum()), 1)
        out: dict = {"epoch_items": int(per_pack.sum()), "packs": {}, "corpora": {}, "languages": {}}
        for i, path in enumerate(self.paths):
            out["packs"][path] = {"items": int(per_pack[i]), "share": float(per_pack[i] / total),
                                  "target": self.targets[i], "pack_items": self.sizes[i]}
            for key, name in (("corpora", self.corpora[i]), ("languages", self.languages[i])):
                entry = out[key].setdefault(name, {"items": 0, "share": 0.0, "target": 0.0})
                entry["items"] += int(per_pack[i])
                entry["share"] = entry["items"] / total
                entry["target"] += self.targets[i]
        return out


__all__ = ["PackWeighting", "epoch_items", "hours_beta_weights", "largest_remainder", "pack_counts", "pack_stream"]
