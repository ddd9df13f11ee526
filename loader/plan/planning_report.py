"""``speechpack plan``: a dry run of the epoch plan (no audio read) and what it does with the data.

Per epoch, over all ranks: batches per rank, items per batch and the rows the loader makes of them (the words are
docs/loader.md's, "Dry run": an item is what the plan places in a batch, a row one entry of the batch the loader
yields), frame utilisation (real / padded elements, where a batch's padded size is items x its longest item, in
the loader's samples; for a builder that crops a batch to its shortest row instead, ``crops_to_shortest`` (ASD
training), the frames kept / the frames offered, MuVAP's ``sum |b| * min L / sum L``), the largest batch, the
items padded or dropped, epochs consumed per pack (valid units of a pack / its units) and, with weighting, the
realised selection per pack, corpus and language (``PackWeighting.report``).  A unit is an item (one mixture, or
one target with ``expand_targets``) or, with ``train_window``, one chunk.

A batch the loader would refuse (the builder's ``planned_batch_check``: TSE mixtures of different channel counts)
fails the dry run with the loader's reason, so ``plan`` reporting success means the epochs it planned can be built.

The picture (``speechpack plan --plot``, ``plot_plan``): the dry run's batches as two histograms, the rows of each batch (what the model gets:
a TSE mixture gives one row per target speaker; items where a task has one row per item) and the fraction of each
batch that is padding (or, for builders that crop to the shortest item, the fraction cropped).

Both axes are drawn as what they are: counts are whole numbers, one bar per count; a fraction runs from 0 to 1,
whatever the data.  Batches with no padding at all are counted in the title, not drawn as a bar that would read as
"up to 5 %"; a plan where no batch is padded says so in the panel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from speechpack.loader.config import LoaderConfig
from speechpack.loader.cache import open_cached_pack
from speechpack.loader.cache.schedule import CacheSimulation, FileSchedule, simulate
from speechpack.loader.cache.settings import cache_in_use
from speechpack.loader.cache.shard_order import PlanningView, shard_windows
from speechpack.loader.memory_limit import MemoryCeiling
from speechpack.loader.plan.plan import EpochPlan, plan_epoch
from speechpack.loader.recipe import ignored_line
from speechpack.loader.tasks import prepare
from speechpack.schemas.errors import PlanError, SpeechpackError
from speechpack.schemas.plotting import integer_axis, pyplot, save_figure
from speechpack.schemas.units import format_bytes, plural


@dataclass
class EpochStats:
    epoch: int
    batches_per_rank: int
    items: np.ndarray  # per batch, all ranks
    longest: np.ndarray  # per batch: the padded length
    real: int
    padded_elements: int
    padded_items: int
    dropped_items: int
    pack_epochs: dict[str, float]
    weighting: dict | None = None
    fill: np.ndarray | None = None  # per batch: real / padded elements
    #: Batches crop to their shortest row: ``longest`` is then the batch's width (its shortest row), ``real`` the
    #: frames kept and ``offered`` the frames its valid rows had.
    cropped: bool = False
    offered: int = 0
    #: Per batch, the rows the loader yields (a TSE mixture gives one per target speaker); ``None``: one per item.
    rows: np.ndarray | None = None
    #: Packs by URL: what the node cache (every rank on one node) does this epoch at the config's limit.
    cache: CacheSimulation | None = None

    @property
    def utilisation(self) -> float:
        if self.cropped:
            return self.real / self.offered if self.offered else 1.0
        return self.real / self.padded_elements if self.padded_elements else 1.0


@dataclass
class PlanReport:
    state: str
    world_size: int
    units: int
    unit_name: str  # singular: "item", "train-window chunk"
    epochs: list[EpochStats] = field(default_factory=list)
    #: A WeSep recipe's trainer sections, ignored by the loader.
    ignored: tuple[str, ...] = ()

    def describe(self) -> str:
        lines = [f"{self.state}: {plural(self.units, self.unit_name)}, world size {self.world_size}"]
        if self.ignored:
            lines.append(ignored_line(self.ignored))
        for e in self.epochs:
            lines.append(f"epoch {e.epoch}: {plural(e.batches_per_rank, 'batch')} per rank; " + _per_batch(e)
                         + f"; utilisation {100 * e.utilisation:.3f}% " + _utilisation_detail(e)
                         + f"; {e.padded_items} padded, {e.dropped_items} dropped")
            for pack, used in e.pack_epochs.items():
                lines.append(f"  pack {pack}: {used:.3f} epochs consumed")
            if e.weighting:
                lines.extend(_weighting_lines(e.weighting))
            if e.cache is not None:
                lines.append(_cache_line(e.cache))
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """Histograms of items per batch and of the padded (or cropped) fraction per batch, all epochs, to a PNG
        (``plot_plan`` below; needs the ``plot`` extra)."""

        plot_plan(self, path)


def _range_text(values: np.ndarray, note: str = "") -> str:
    """``low-high (mean m; note)`` of a per-batch count; one number when every batch has the same."""
    low, high = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    notes = ([f"mean {values.mean():.1f}"] if low != high else []) + ([note] if note else [])
    return (f"{low}" if low == high else f"{low}-{high}") + (f" ({'; '.join(notes)})" if notes else "")


def _per_batch(e: EpochStats) -> str:
    """Items per batch and, where they differ, the rows the loader makes of them."""
    text = f"items per batch {_range_text(e.items)}"
    if e.rows is not None and not np.array_equal(e.rows, e.items):
        text += f", rows per batch {_range_text(e.rows, 'one per target speaker')}"
    return text


def _utilisation_detail(e: EpochStats) -> str:
    """How the utilisation was counted, and the largest batch."""
    cells = e.items * e.longest
    big = int(np.argmax(cells)) if len(cells) else 0
    largest = (f"largest batch {int(e.items[big])} x {int(e.longest[big])} = {int(cells[big])}" if len(cells)
               else "no batches")
    if e.cropped:
        return f"({e.real} of {e.offered} frames kept: batches crop to their shortest row); {largest}"
    return f"({e.real} real / {e.padded_elements} padded elements); {largest}"


def _cache_line(c: CacheSimulation) -> str:
    """The node cache's epoch: fetched bytes at the limit, the once-per-epoch limit, the hit rate."""
    limit = "no limit" if c.limit is None else f"limit {format_bytes(c.limit)}"
    return (f"  cache ({limit}): {format_bytes(c.fetched)} fetched of {format_bytes(c.distinct)} read "
            f"({c.fetched / max(c.distinct, 1):.2f}x); each file fetched once from {format_bytes(c.once_limit)}; "
            f"hit rate {100 * c.hit_rate:.1f}%")


def _weighting_lines(report: dict) -> list[str]:
    """Realised shares per corpus and language (``PackWeighting.report``); the raw dict if its shape differs."""
    lines = []
    for group in ("corpora", "languages"):
        entries = report.get(group)
        if not isinstance(entries, dict):
            continue
        try:
            cells = [f"{name} {100 * v['share']:.1f}% (target {100 * v['target']:.1f}%)" for name, v in entries.items()]
        except (KeyError, TypeError):
            return [f"  weighting: {report}"]
        lines.append(f"  realised {group}: " + ", ".join(cells))
    return lines or [f"  weighting: {report}"]


def plan_report(config: dict | LoaderConfig, state: str = "train", *, world_size: int = 1, epochs: int = 1,
                seed: int = 0) -> PlanReport:
    """Plan ``epochs`` epochs of every rank, reading only the packs' indexes: the same ``plan_epoch`` the training
    loader runs, without torch's DataLoader."""
    if world_size < 1 or epochs < 1:
        raise SpeechpackError(f"world size and epochs must be at least 1, got {world_size}, {epochs}")
    if not isinstance(config, LoaderConfig):
        config = LoaderConfig.from_dict(config, state=state)
    with cache_in_use(config.cache):  # banks and tokenizer packs a task opens by URL go through the same cache
        opened = [open_cached_pack(source.path, config.cache, verify=config.verify_streams)
                  for source in config.packs]
        prepared = prepare(config, state, opened, seed)
    builder = prepared.builder
    order = shard_windows(opened, builder, prepared.weighting is not None)
    args = builder.plan_args if order is None else PlanningView(builder.plan_args, order)
    caches = [p.files.cache for p in opened if hasattr(p.files, "cache")]
    limits = [c.limit for c in caches if c.limit is not None]
    cropped = builder.crops_to_shortest
    windows = builder.windows
    unit_pack = prepared.item_pack if windows is None else prepared.item_pack[windows.item]
    packs = [source.path for source in config.packs]
    per_pack = np.bincount(unit_pack, minlength=len(packs))
    rows_of_unit, check = builder.unit_rows(), builder.planned_batch_check()
    units = builder.unit_samples() if caches else None  # (pack, sample) per unit, for the cache's replay
    ceiling = MemoryCeiling.of(config.memory_limit)  # read once, as the loader does when it starts
    report = PlanReport(state=state, world_size=world_size, units=builder.num_units(),
                        unit_name="item" if windows is None else "train-window chunk", ignored=config.ignored)
    for epoch in range(epochs):
        lengths = builder.unit_lengths(epoch)  # the same every epoch, unless lengths_by_epoch (ASD jitter)
        plans: list[EpochPlan] = [
            plan_epoch(args, seed, epoch, rank, world_size, num_units=builder.num_units(), lengths=lengths,
                       windows=windows, weighting=prepared.weighting, memory_limit=ceiling)
            for rank in range(world_size)]
        rows, batch_rows, longest, fills, used = [], [], [], [], np.zeros(len(packs))
        real = offered = 0
        for rank, plan in enumerate(plans):
            for b in range(len(plan)):
                items, valid = plan.batch(b)
                if check is not None:
                    check(items, epoch=epoch, rank=rank, batch=b, batches=len(plan))
                lens = lengths[items]
                rows.append(len(items))
                if rows_of_unit is not None:
                    batch_rows.append(int(rows_of_unit[items].sum()))
                if cropped:  # every row is cut to the shortest: what survives of the valid rows' frames
                    longest.append(int(lens.min()) if len(lens) else 0)
                    offered_b = int(lens[valid].sum())
                    real_b = int(valid.sum()) * longest[-1]
                    offered += offered_b
                    fills.append(real_b / max(offered_b, 1))
                else:
                    longest.append(int(lens.max()) if len(lens) else 0)
                    real_b = int(lens[valid].sum())
                    fills.append(real_b / max(rows[-1] * longest[-1], 1))
                real += real_b
                used += np.bincount(unit_pack[items[valid]], minlength=len(packs))
        rows_a, longest_a = np.asarray(rows, dtype=np.int64), np.asarray(longest, dtype=np.int64)
        weighting = None
        if prepared.weighting is not None:
            weighting = prepared.weighting.report(prepared.weighting.items(seed, epoch))
        stats = EpochStats(epoch=epoch, batches_per_rank=len(plans[0]), items=rows_a, longest=longest_a, real=real,
                           padded_elements=int((rows_a * longest_a).sum()), padded_items=plans[0].padded,
                           dropped_items=plans[0].dropped,
                           pack_epochs={p: float(used[i] / per_pack[i]) if per_pack[i] else 0.0
                                        for i, p in enumerate(packs)}, weighting=weighting,
                           fill=np.asarray(fills), cropped=cropped, offered=offered,
                           rows=np.asarray(batch_rows, dtype=np.int64) if rows_of_unit is not None else None)
        if units is not None:  # every rank on one node: the cache's whole load
            stats.cache = simulate(FileSchedule.of(opened, plans, units), min(limits, default=None))
        report.epochs.append(stats)
        if stats.batches_per_rank == 0:
            raise PlanError(_no_batch(report, builder.args, epoch, stats.dropped_items))
    return report


def _no_batch(report: PlanReport, args, epoch: int, dropped: int) -> str:
    """Why an epoch plans nothing to train on, and what would give it batches (the loader would yield none)."""
    units = plural(report.units, report.unit_name)
    size = getattr(args, "batch_size", None)
    if dropped and getattr(args, "tail", None) == "drop":
        needed = f"batch_size {size} x world size {report.world_size}" if size else f"world size {report.world_size}"
        return (f"{report.state}: epoch {epoch} has no batch to train on: {units}, all {dropped} dropped as an "
                f"incomplete round (drop_last: true / tail: drop; a round takes {needed}); lower the batch size "
                f"or set drop_last: false (tail: pad)")
    return f"{report.state}: epoch {epoch} has no batch to train on ({units})"


#: Bins of the padding histogram over [0, 1].
FRACTION_BINS = 20


def plot_plan(report, path: str) -> None:
    """Write the histograms of ``report`` (all epochs) to the PNG ``path``."""
    save_figure(plan_figure(report), path, "plan --plot")


def plan_figure(report):
    """The matplotlib figure of ``report``'s histograms (the caller saves and closes it)."""
    plt = pyplot("plan --plot")
    items = np.concatenate([e.items for e in report.epochs])
    with_rows = all(e.rows is not None for e in report.epochs)
    rows = np.concatenate([e.rows for e in report.epochs]) if with_rows else items
    longest = np.concatenate([e.longest for e in report.epochs])
    fill = np.concatenate([e.fill if e.fill is not None else np.ones(len(e.items)) for e in report.epochs])
    cropped = any(e.cropped for e in report.epochs)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    sizes, counts = np.unique(rows, return_counts=True)
    a.bar(sizes, counts, width=0.8)
    low, high = (int(sizes.min()), int(sizes.max())) if len(sizes) else (0, 1)
    item_sizes = sorted({int(n) for n in items})
    per_batch = (f"{item_sizes[0]} items each" if len(item_sizes) == 1 else
                 f"{item_sizes[0]}-{item_sizes[-1]} items") if item_sizes else "no items"
    a.set(xlim=(low - 1, high + 1), ylabel="batches",
          xlabel="rows per batch (one per target speaker of each item)" if with_rows else "items per batch",
          title=f"batch sizes ({per_batch})" if with_rows else "batch sizes")
    integer_axis(a.xaxis)
    integer_axis(a.yaxis)
    what = "cropped" if cropped else "padded"
    fraction = np.clip(1 - fill, 0.0, 1.0)
    some = fraction[fraction > 0]
    if some.size:
        b.hist(some, bins=FRACTION_BINS, range=(0.0, 1.0))
    else:
        b.text(0.5, 0.5, f"no batch is {what}", ha="center", va="center", transform=b.transAxes)
    none = len(fraction) - some.size
    b.set(xlim=(0.0, 1.0), xlabel=f"{what} fraction of the batch's frames", ylabel="batches",
          title=("cropping" if cropped else "padding") + (f" ({plural(none, 'batch')} with none)" if some.size and
                                                          none else ""))
    integer_axis(b.yaxis)
    fig.suptitle(f"{report.state}: {plural(len(items), 'batch')} over {plural(len(report.epochs), 'epoch')}, "
                 f"longest item {int(longest.max()) if len(longest) else 0} samples")
    fig.tight_layout()
    return fig


__all__ = ["PlanReport", "plan_figure", "plan_report", "plot_plan"]
