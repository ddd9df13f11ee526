"""``speechpack plan``: a dry run of the epoch plan (no audio read) and what it does with the data.

Per epoch, over all ranks: batches per rank, items per batch and the rows the loader makes of them (the words are
docs/loader.md's, "Dry run": an item is what the plan places in a batch, a row one entry of the batch the loader
yields), frame utilisation (real / padded elements, where a batch's padded size is items x its longest item, in
the loader's samples; for a builder that crops a batch to its shortest row instead, ``crops_to_shortest`` (ASD
training), the frames kept / the frames offered, MuVAP's ``sum |b| * min L / sum L``), the largest batch, the
items padded or dropped, epochs consumed per pack (valid units of a pack / its units), with weighting the
realised selection per pack, corpus and language (``PackWeighting.report``), and for packs by URL what the node
cache does at the config's limit (``loader.cache.schedule.simulate``): bytes and requests per epoch and the smallest
limit that fetches each byte once, in the config's order and, for the first epoch, in the other one (the default
shuffle, or the shard windows ``loader.cache.shard_order.window_for_limit`` suggests), so a user sees what
``dataset_args.shard_window`` would change before choosing it; with compressed packs the audio the workers decode
and its core time (``loader.plan.decode_cost``).  A unit is an item (one mixture, or
one target with ``expand_targets``) or, with ``train_window``, one chunk.

A batch the loader would refuse (the builder's ``dry_run().batch_check``: TSE mixtures of different channel counts)
fails the dry run with the loader's reason, so ``plan`` reporting success means the epochs it planned can be built;
each distinct batch is checked once.  A plan with no batch fails with the counts and the setting that emptied it
(``loader.plan.no_batch``).

Cost: each epoch is planned once for every rank (``loader.plan.plan_epoch`` with ``EVERY_RANK``) and its figures are
array reductions, so a dry run is linear in the batches and the ranks (the largest world size, 2^20, answers in
seconds).  ``--epochs`` is at most ``MAX_PLAN_EPOCHS``; a pass or figures over ``memory_limit`` are refused.
The ranks are summarised in one line (valid items per rank, the ranks that get only padding, utilisation per rank).

The picture (``speechpack plan --plot``, ``plot_plan``): six panels of what ``describe`` prints.  The dry run's
batches as two histograms, the rows of each batch (what the model gets: a TSE mixture gives one row per target
speaker; items where a task has one row per item) and the fraction of each batch that is padding (or, for builders
that crop to the shortest item, the fraction cropped); what the plan did with the items (dealt, padding repeats,
dropped, filtered out); valid items and utilisation per rank; epochs consumed per pack.

Both axes are drawn as what they are: counts are whole numbers, one bar per count; a fraction runs from 0 to 1,
whatever the data.  Batches with no padding at all are counted in the title, not drawn as a bar that would read as
"up to 5 %"; a plan where no batch is padded says so in the panel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral

import numpy as np

from speechpack.loader.config import LoaderConfig
from speechpack.loader.cache import open_cached_pack
from speechpack.loader.cache.schedule import CacheSimulation, FileSchedule, simulate
from speechpack.loader.cache.shard_order import planning_view, shard_windows, window_for_limit, with_shard_order_alias
from speechpack.loader.memory_limit import MemoryCeiling
from speechpack.loader.plan.decode_cost import DecodeCost, decode_cost
from speechpack.loader.plan.no_batch import no_batch_message, no_batch_reason
from speechpack.loader.plan.epoch_plan import EVERY_RANK, MAX_WORLD_SIZE, EpochPlan, plan_epoch
from speechpack.loader.recipe import ignored_line
from speechpack.loader.tasks import prepare
from speechpack.schemas.errors import PlanError
from speechpack.schemas.plotting import integer_axis, path_labels, pyplot, save_figure
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
    #: Packs by URL: what the node cache (every rank on one node) does this epoch at the config's limit, in the
    #: config's order (``order``: ``default shuffle`` or ``shard_window N``) and, for the first epoch, in the other
    #: order (``other_order``, ``other_cache``: the shard windows ``window_for_limit`` suggests, or the default
    #: shuffle; None for a weighted epoch, which has no shard windows).
    cache: CacheSimulation | None = None
    order: str = ""
    other_order: str = ""
    other_cache: CacheSimulation | None = None
    #: Per rank: the valid items its batches hold, and its utilisation (as ``utilisation``, over its batches).
    rank_items: np.ndarray | None = None
    rank_utilisation: np.ndarray | None = None
    #: Compressed packs: the audio the workers decode this epoch (``loader.plan.decode_cost``); None: none is.
    decode: DecodeCost | None = None

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
    #: Items the task's filters removed before planning (``filter_report``: per reason).
    filtered: int = 0
    filter_report: dict = field(default_factory=dict)
    #: Planning units per pack (the denominators of "epochs consumed").
    pack_items: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        lines = [f"{self.state}: {plural(self.units, self.unit_name)}, world size {self.world_size}"]
        if self.filtered:
            reasons = ", ".join(f"{reason} {count}" for reason, count in self.filter_report.items())
            lines[0] += f"; {self.filtered} filtered out" + (f" ({reasons})" if reasons else "")
        if self.ignored:
            lines.append(ignored_line(self.ignored))
        for e in self.epochs:
            lines.append(f"epoch {e.epoch}: {plural(e.batches_per_rank, 'batch')} per rank; " + _per_batch(e)
                         + f"; utilisation {100 * e.utilisation:.3f}% " + _utilisation_detail(e)
                         + f"; {e.padded_items} padded, {e.dropped_items} dropped")
            if self.world_size > 1 and e.rank_items is not None:
                lines.append(_rank_line(e))
            for pack, used in e.pack_epochs.items():
                lines.append(f"  pack {pack}: {used:.3f} epochs consumed")
            if e.weighting:
                lines.extend(_weighting_lines(e.weighting))
            if e.cache is not None:
                lines.append(_cache_line(e.cache, e.order))
            if e.other_cache is not None:
                lines.append(_cache_line(e.other_cache, e.other_order, other=True))
            if e.decode is not None:
                lines.append(e.decode.describe())
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """The plan's six panels (batch sizes, padding, what was dropped, per rank, per pack), all epochs, to a PNG
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


def _rank_line(e: EpochStats) -> str:
    """The ranks of a pass, summarised (a million ranks in one line): valid items and utilisation per rank, the
    lowest rank named, and how many ranks get only padding."""
    items, used = e.rank_items, e.rank_utilisation
    idle = int(np.count_nonzero(items == 0))
    low = int(np.argmin(used))
    idle_note = f"{plural(idle, 'rank')} only padding" if idle else ""
    spread = (f"{100 * float(used.min()):.1f}%" if float(used.min()) == float(used.max())
              else f"{100 * float(used.min()):.1f}%-{100 * float(used.max()):.1f}% (lowest: rank {low})")
    return f"  ranks: valid items per rank {_range_text(items, idle_note)}; utilisation per rank {spread}"


def _cache_line(c: CacheSimulation, order: str, other: bool = False) -> str:
    """The node cache's epoch in one order: bytes and requests at the limit, the smallest limit that fetches each
    byte once, the hit rate; ``other``: the order the config does not use, for comparison."""
    limit = "no limit" if c.limit is None else f"limit {format_bytes(c.limit)}"
    which = f"{order}, not configured" if other else order
    return (f"  cache ({limit}; {which}): {format_bytes(c.fetched)} fetched of {format_bytes(c.distinct)} read "
            f"({c.fetched / max(c.distinct, 1):.2f}x) in {plural(c.requests, 'request')}; each byte fetched once "
            f"from {format_bytes(c.once_limit)}; hit rate {100 * c.hit_rate:.1f}%")


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


#: Most epochs one dry run plans (``speechpack plan --epochs``): each is planned whole, every rank, so a larger count
#: only takes longer and keeps more figures, while a thousand epochs already show every cycle a weighting makes.
MAX_PLAN_EPOCHS = 1000
#: What the report keeps per batch (items, rows, longest, fill, rank) and per rank (valid items, utilisation),
#: in bytes: ``plan_report`` refuses epochs whose figures would take more than the memory limit.
FIGURE_BYTES_PER_BATCH, FIGURE_BYTES_PER_RANK = 40, 16


def plan_report(config: dict | LoaderConfig, state: str = "train", *, world_size: int = 1, epochs: int = 1,
                seed: int = 0) -> PlanReport:
    """Plan ``epochs`` epochs of every rank, reading only the packs' indexes: the same ``plan_epoch`` the training
    loader runs, without torch's DataLoader.  Each epoch is planned once for all ranks (``EVERY_RANK``: the pass in
    global order, rank ``r``'s batches at offsets ``r, r + world_size, ...``) and its figures are computed over
    arrays, so the cost is linear in the batches and the world size, not in their product."""
    if (isinstance(world_size, bool) or not isinstance(world_size, Integral) or not 1 <= world_size <= MAX_WORLD_SIZE
            or isinstance(epochs, bool) or not isinstance(epochs, Integral) or not 1 <= epochs <= MAX_PLAN_EPOCHS):
        raise PlanError(f"world size must be in [1, {MAX_WORLD_SIZE}] and epochs in [1, {MAX_PLAN_EPOCHS}], got "
                        f"{world_size!r}, {epochs!r}")
    world_size, epochs = int(world_size), int(epochs)
    if not isinstance(config, LoaderConfig):
        config = LoaderConfig.from_dict(config, state=state)
    config = with_shard_order_alias(config)  # the deprecated cache.shard_order, as the loader reads it
    opened = [open_cached_pack(source.path, config.cache, verify=config.verify_streams) for source in config.packs]
    prepared = prepare(config, state, opened, seed)
    builder = prepared.builder
    weighted = prepared.weighting is not None
    window = config.dataset_args.shard_window
    order = shard_windows(opened, builder, window, weighted)
    args = planning_view(builder.plan_args, order)
    caches = [p.files.node_cache for p in opened if p.files.node_cache is not None]
    limits = [c.limit for c in caches if c.limit is not None]
    limit = min(limits, default=None)
    train_windows = builder.units.train_windows
    unit_pack = prepared.item_pack if train_windows is None else prepared.item_pack[train_windows.item]
    packs = [source.path for source in config.packs]
    per_pack = np.bincount(unit_pack, minlength=len(packs))
    dry_run = builder.dry_run()  # what the dry run reads beyond the plan (BatchBuilder.dry_run)
    rows_of_unit, check = dry_run.rows, dry_run.batch_check
    compressed = any(p.blocks for p in opened)
    units = builder.units.samples() if caches or compressed else None  # (pack, sample) per unit: cache, decode
    ceiling = MemoryCeiling.of(config.memory_limit)  # read once, as the loader does when it starts
    report = PlanReport(state=state, world_size=world_size, units=builder.units.count,
                        unit_name="item" if train_windows is None else "train-window chunk", ignored=config.ignored,
                        filtered=prepared.filtered, filter_report=dict(prepared.filter_report),
                        pack_items={p: int(n) for p, n in zip(packs, per_pack)})
    for epoch in range(epochs):
        lengths = builder.units.lengths(epoch)  # the same every epoch, unless lengths_by_epoch (ASD jitter)
        plan = plan_epoch(args, seed, epoch, EVERY_RANK, world_size, num_units=builder.units.count,
                          lengths=lengths, train_windows=train_windows, weighting=prepared.weighting,
                          memory_limit=ceiling)
        if check is not None:
            _check_batches(plan, check, epoch, world_size)
        if epoch == 0:  # a task's refusal at start (BatchBuilder.check_plan), as the loader makes it
            builder.check_plan(plan.rank_view(0, world_size), world_size)
        stats = _epoch_stats(plan, epoch, world_size, np.asarray(lengths), dry_run.crops_to_shortest, unit_pack,
                             rows_of_unit, packs, per_pack)
        if prepared.weighting is not None:
            stats.weighting = prepared.weighting.report(prepared.weighting.items(seed, epoch))
        if compressed:
            stats.decode = decode_cost(opened, *units, plan.items, plan.valid, lengths,
                                       builder.sample_rate)
        if units is not None and caches:  # every rank on one node: the cache's whole load
            stats.cache = _simulate_pass(plan, opened, units, world_size, limit)
            stats.order = "default shuffle" if order is None else f"shard_window {window}"
            if epoch == 0 and (order is not None or not weighted):
                other_window = window_for_limit(opened, limit) if order is None else None
                other = plan_epoch(planning_view(builder.plan_args, shard_windows(opened, builder, other_window,
                                                                                  weighted)),
                                   seed, epoch, EVERY_RANK, world_size, num_units=builder.units.count,
                                   lengths=lengths, train_windows=train_windows, weighting=prepared.weighting,
                                   memory_limit=ceiling)
                stats.other_cache = _simulate_pass(other, opened, units, world_size, limit)
                stats.other_order = "default shuffle" if other_window is None else f"shard_window {other_window}"
        if epoch == 0:
            _check_figure_memory(stats, epochs, world_size, ceiling)
        report.epochs.append(stats)
        if stats.batches_per_rank == 0:
            raise PlanError(no_batch_message(report.state, no_batch_reason(
                args, report.units, world_size, dropped=stats.dropped_items, unit_name=report.unit_name,
                filtered=report.filtered, filter_report=report.filter_report, weighted=prepared.weighting is not None),
                epoch=epoch))
    return report


def _simulate_pass(plan: EpochPlan, packs: list, units, world_size: int, limit: int | None) -> CacheSimulation:
    """One node cache holding every rank's files (``FileSchedule.of`` of the ranks' views of ``plan``)."""
    plans = [plan.rank_view(rank, world_size) for rank in range(world_size)]
    return simulate(FileSchedule.of(packs, plans, units), limit)


def _epoch_stats(plan: EpochPlan, epoch: int, world_size: int, lengths: np.ndarray, cropped: bool,
                 unit_pack: np.ndarray, rows_of_unit: np.ndarray | None, packs: list[str],
                 per_pack: np.ndarray) -> EpochStats:
    """The figures of one epoch's pass of every rank, over arrays: per batch its items, rows, padded length (or,
    cropping, its width) and fill; per rank its valid items and utilisation; per pack the epochs consumed."""
    sizes = plan.sizes()
    batches = len(sizes)
    items, valid = np.asarray(plan.items).reshape(-1), np.asarray(plan.valid).reshape(-1)
    lens = lengths[items] if len(items) else np.zeros(0, np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if batches else sizes
    filled = sizes > 0

    def per_batch(values: np.ndarray, reduce) -> np.ndarray:
        out = np.zeros(batches, dtype=np.int64)
        if filled.any():
            out[filled] = reduce.reduceat(values, starts[filled])
        return out

    valid_n = per_batch(valid.astype(np.int64), np.add)
    offered_b = per_batch(np.where(valid, lens, 0).astype(np.int64), np.add)
    if cropped:  # every row is cut to the shortest: what survives of the valid rows' frames
        longest = per_batch(lens, np.minimum)
        real_b = valid_n * longest
        fill = real_b / np.maximum(offered_b, 1)
        cells = offered_b
    else:
        longest = per_batch(lens, np.maximum)
        real_b = offered_b
        fill = real_b / np.maximum(sizes * longest, 1)
        cells = sizes * longest
    rank_of = np.arange(batches, dtype=np.int64) % world_size
    rank_items = np.bincount(rank_of, weights=valid_n, minlength=world_size).astype(np.int64)
    rank_real = np.bincount(rank_of, weights=real_b, minlength=world_size)
    rank_cells = np.bincount(rank_of, weights=cells, minlength=world_size)
    used = np.bincount(unit_pack[items[valid]], minlength=len(packs)) if len(items) else np.zeros(len(packs))
    rows = None
    if rows_of_unit is not None:
        rows = per_batch(np.asarray(rows_of_unit, dtype=np.int64)[items], np.add) if len(items) else sizes
    return EpochStats(epoch=epoch, batches_per_rank=batches // world_size, items=sizes, longest=longest,
                      real=int(real_b.sum()), padded_elements=int((sizes * longest).sum()),
                      padded_items=plan.padded, dropped_items=plan.dropped,
                      pack_epochs={p: float(used[i] / per_pack[i]) if per_pack[i] else 0.0
                                   for i, p in enumerate(packs)},
                      fill=fill, cropped=cropped, offered=int(offered_b.sum()) if cropped else 0, rows=rows,
                      rank_items=rank_items,
                      rank_utilisation=np.where(rank_cells > 0, rank_real / np.maximum(rank_cells, 1), 1.0)
                      .astype(np.float32))


def _check_batches(plan: EpochPlan, check, epoch: int, world_size: int) -> None:
    """The builder's check of every batch of the pass, each distinct batch once (a padding batch repeats units an
    earlier batch holds, so at a large world size most are the same), earliest global batch first."""
    sizes = plan.sizes()
    per_rank = len(sizes) // world_size
    if plan.offsets is None:
        groups = [(np.arange(len(sizes)), np.asarray(plan.items))] if len(sizes) else []
    else:
        groups = []
        for size in np.unique(sizes):
            which = np.flatnonzero(sizes == size)
            rows = plan.offsets[which][:, None] + np.arange(size, dtype=np.int64)
            groups.append((which, plan.items[rows]))
    firsts = [which[_first_of_each(table)] for which, table in groups]
    for g in np.sort(np.concatenate(firsts)) if firsts else []:
        units, _valid = plan.batch(int(g))
        check(units, epoch=epoch, rank=int(g) % world_size, batch=int(g) // world_size, batches=per_rank)


def _first_of_each(table: np.ndarray) -> np.ndarray:
    """Row indices of ``table``'s first occurrence of each distinct row (a stable sort by every column: equal rows
    keep their order, so the first of a run is the earliest; several times faster than ``np.unique(axis=0)``)."""
    if len(table) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(table.T[::-1])
    ordered = table[order]
    starts = np.concatenate([[True], np.any(ordered[1:] != ordered[:-1], axis=1)])
    return order[starts]


def _check_figure_memory(first: EpochStats, epochs: int, world_size: int, ceiling: MemoryCeiling) -> None:
    """Refuse, after the first epoch, a dry run whose figures for ``epochs`` epochs would pass the memory limit."""
    per_epoch = len(first.items) * FIGURE_BYTES_PER_BATCH + world_size * FIGURE_BYTES_PER_RANK
    if per_epoch * epochs > ceiling.limit:
        raise PlanError(f"{plural(epochs, 'epoch', 'epochs')} of {plural(len(first.items), 'batch')} over "
                        f"{plural(world_size, 'rank')} keep about {format_bytes(per_epoch * epochs)} of figures, over "
                        f"{ceiling}; plan fewer epochs")


#: Bins of the padding histogram over [0, 1].
FRACTION_BINS = 20


def plot_plan(report, path: str) -> None:
    """Write the histograms of ``report`` (all epochs) to the PNG ``path``."""
    save_figure(plan_figure(report), path, "plan --plot")


#: Up to this many ranks, the rank panels draw one bar per rank; beyond, a histogram of the ranks.
RANK_BARS = 32
#: A rank histogram whose tallest bar is more than this many times its shortest is drawn on a log scale.
LOG_SPREAD = 100


def _counted(count: int, noun: str) -> str:
    """``plural`` with thousands separators, for pictures (``1,048,574 ranks``)."""
    return plural(int(count), noun).replace(str(int(count)), f"{int(count):,}", 1)


def count_ticks(axis, most: int | None = None) -> None:
    """Counts written whole, with thousands separators (2,097,152, never "2.1 1e6"); at most ``most`` ticks (an
    axis along which such labels run)."""
    from matplotlib.ticker import MaxNLocator, StrMethodFormatter

    if most is not None:
        axis.set_major_locator(MaxNLocator(most, integer=True))
    axis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def plan_figure(report):
    """The matplotlib figure of ``report`` (the caller saves and closes it): six panels, all epochs together.

    Top: rows per batch, the padded (or cropped) fraction of each batch, and what the plan did with the items
    (dealt, padding repeats, dropped by the tail rule, removed by the filters).  Bottom: valid items per rank and
    utilisation per rank (a bar per rank up to ``RANK_BARS`` ranks, else how many ranks have each figure), and the
    epochs consumed of each pack per planned epoch: the figures ``describe`` prints."""
    plt = pyplot("plan --plot")
    epochs = len(report.epochs)
    items = np.concatenate([e.items for e in report.epochs])
    with_rows = all(e.rows is not None for e in report.epochs)
    rows = np.concatenate([e.rows for e in report.epochs]) if with_rows else items
    longest = np.concatenate([e.longest for e in report.epochs])
    fill = np.concatenate([e.fill if e.fill is not None else np.ones(len(e.items)) for e in report.epochs])
    cropped = any(e.cropped for e in report.epochs)
    fig, ((a, b, c), (d, u, f)) = plt.subplots(2, 3, figsize=(16, 8.5))
    _sizes_panel(a, items, rows, with_rows)
    _padding_panel(b, fill, cropped)
    _outcome_panel(c, report, epochs)
    _rank_panels(d, u, report)
    _pack_panel(f, report, epochs)
    fig.suptitle(f"{report.state}: {_counted(len(items), 'batch')} over {plural(epochs, 'epoch', 'epochs')}, "
                 f"{_counted(report.world_size, 'rank')}, longest item "
                 f"{int(longest.max()) if len(longest) else 0} samples")
    fig.tight_layout()
    return fig


def _sizes_panel(a, items: np.ndarray, rows: np.ndarray, with_rows: bool) -> None:
    """Rows (or items) per batch: one bar per count."""
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
    count_ticks(a.yaxis)


def _padding_panel(b, fill: np.ndarray, cropped: bool) -> None:
    """The padded (or cropped) fraction of each batch on [0, 1]; batches with none counted in the title."""
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
    count_ticks(b.yaxis)


def _labelled_bars(ax, labels: list[str], values: list[float], text: list[str], colors=None,
                   at_least: float = 0.0) -> None:
    """Horizontal bars, first at the top, each with its figure written at its end (room left for the text); the
    axis reaches ``at_least`` whatever the values."""
    positions = np.arange(len(labels))[::-1]
    ax.barh(positions, values, color=colors)
    ax.set_yticks(positions, labels)
    top = max(max(values, default=0), at_least) or 1
    for y, value, label in zip(positions, values, text):
        ax.text(value + 0.015 * top, y, label, va="center", fontsize="small")
    ax.set_xlim(0, top * 1.5)


def _outcome_panel(c, report, epochs: int) -> None:
    """What the plan did with the units: dealt once, repeated as padding, dropped by the tail rule, and the items
    the filters removed before planning (once, not per epoch)."""
    dealt = sum(int(e.rank_items.sum()) if e.rank_items is not None else 0 for e in report.epochs)
    padded = sum(e.padded_items for e in report.epochs)
    dropped = sum(e.dropped_items for e in report.epochs)
    unit = report.unit_name
    labels = [f"dealt ({unit}s in a batch)", "padding rows (repeats)", "dropped (tail: drop)",
              "filtered out (before planning)"]
    values = [dealt, padded, dropped, report.filtered]
    _labelled_bars(c, labels, values, [f"{v:,}" for v in values],
                   colors=["tab:blue", "tab:orange", "tab:red", "tab:gray"])
    c.set(xlabel=f"{unit}s" + (f", {epochs} epochs together" if epochs > 1 else ""),
          title="what the plan did with the items")
    integer_axis(c.xaxis)
    count_ticks(c.xaxis, most=3)


def _rank_panels(d, u, report) -> None:
    """Valid items and utilisation per rank, over all epochs: a bar per rank, or a histogram of many ranks."""
    world = report.world_size
    have = [e for e in report.epochs if e.rank_items is not None]
    items = np.sum([e.rank_items for e in have], axis=0) if have else np.zeros(world)
    used = np.mean([e.rank_utilisation for e in have], axis=0) if have else np.ones(world)
    idle = int(np.count_nonzero(items == 0))
    if world <= RANK_BARS:
        d.bar(np.arange(world), items, width=0.8)
        u.bar(np.arange(world), 100 * used, width=0.8, color="tab:green")
        for ax in (d, u):
            ax.set_xlabel("rank")
            ax.set_xticks(np.arange(world)) if world <= 16 else integer_axis(ax.xaxis)
        d.set(ylabel="valid items")
        u.set(ylabel="utilisation, %", ylim=(0, 100), yticks=[0, 25, 50, 75, 100])
    else:
        values, counts = np.unique(items, return_counts=True)
        d.bar(values, counts, width=0.8)
        d.set(xlabel="valid items of a rank", ylabel="ranks")
        integer_axis(d.xaxis)
        shares, _edges, _bars = u.hist(100 * used, bins=FRACTION_BINS, range=(0.0, 100.0), color="tab:green")
        u.set(xlabel="utilisation of a rank, %", ylabel="ranks", xlim=(0, 100))
        for ax, heights in ((d, counts), (u, shares)):  # a few ranks beside a million: a log scale shows both
            heights = np.asarray(heights)[np.asarray(heights) > 0]
            if len(heights) and heights.max() > LOG_SPREAD * heights.min():
                ax.set_yscale("log")
    for ax in (d, u) if world > RANK_BARS else (d,):
        if ax.get_yscale() != "log":
            integer_axis(ax.yaxis)
            count_ticks(ax.yaxis)
    together = f"{len(have)} epochs together" if len(have) > 1 else ""
    notes = [f"{_counted(idle, 'rank')} only padding"] * bool(idle) + [together] * bool(together)
    d.set_title("valid items per rank" + (f"\n({'; '.join(notes)})" if notes else ""))
    low, high = 100 * float(used.min()), 100 * float(used.max())
    u.set_title("utilisation per rank" + f"\n({low:.1f}%" + (f"-{high:.1f}%" if round(low, 1) != round(high, 1)
                                                            else "")
                + ("; mean of the epochs)" if len(have) > 1 else ")"))


def _pack_panel(f, report, epochs: int) -> None:
    """Epochs consumed of each pack per planned epoch (1.0: every unit once), the value written at each bar."""
    packs = list(report.epochs[0].pack_epochs) if report.epochs else []
    means = [float(np.mean([e.pack_epochs[p] for e in report.epochs])) for p in packs]
    units = [report.pack_items.get(p, 0) for p in packs]
    _labelled_bars(f, path_labels(packs), means, [f"{m:.3f} of {plural(n, report.unit_name)}"
                                                  for m, n in zip(means, units)], at_least=1.0)
    f.axvline(1.0, color="gray", linestyle=":", linewidth=1)
    f.set(xlabel="epochs of the pack consumed" + (" per epoch (mean)" if epochs > 1 else ""),
          title="per pack")


__all__ = ["MAX_PLAN_EPOCHS", "PlanReport", "plan_figure", "plan_report", "plot_plan"]
