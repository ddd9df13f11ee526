"""``speechpack plan``: a dry run of the epoch plan (no audio read) and what it does with the data.

Per epoch, over all ranks: batches per rank, rows per batch, frame utilisation (real / padded elements, where a
batch's padded size is rows x its longest row, in the loader's samples; for a builder that crops a batch to its
shortest row instead, ``crops_to_shortest`` (ASD training), the frames kept / the frames offered, MuVAP's
``sum |b| * min L / sum L``), the largest batch, the items padded or
dropped, epochs consumed per pack (valid units of a pack / its units) and, with weighting, the realised
selection per pack, corpus and language (``PackWeighting.report``).  A unit is an item (one mixture, or one
target with ``expand_targets``) or, with ``train_window``, one chunk; rows are counted per unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from loader.config import LoaderConfig
from loader.pack import open_pack
from loader.plan import EpochPlan, epoch_lengths, plan_epoch
from loader.tasks import prepare
from schemas.errors import SpeechpackError


@dataclass
class EpochStats:
    epoch: int
    batches_per_rank: int
    rows: np.ndarray  # per batch, all ranks
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
    unit_name: str
    epochs: list[EpochStats] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"{self.state}: {self.units} {self.unit_name}, world size {self.world_size}"]
        for e in self.epochs:
            cells = e.rows * e.longest
            big = int(np.argmax(cells)) if len(cells) else 0
            lines.append(
                f"epoch {e.epoch}: {e.batches_per_rank} batches per rank; rows per batch "
                f"{int(e.rows.min()) if len(e.rows) else 0}-{int(e.rows.max()) if len(e.rows) else 0} "
                f"(mean {e.rows.mean() if len(e.rows) else 0:.1f}); utilisation {100 * e.utilisation:.3f}% "
                + (f"({e.real} of {e.offered} frames kept: batches crop to their shortest row); largest batch "
                   if e.cropped else f"({e.real} real / {e.padded_elements} padded elements); largest batch ")
                + f"{int(e.rows[big]) if len(cells) else 0} x {int(e.longest[big]) if len(cells) else 0} = "
                f"{int(cells[big]) if len(cells) else 0}; {e.padded_items} padded, {e.dropped_items} dropped")
            for pack, used in e.pack_epochs.items():
                lines.append(f"  pack {pack}: {used:.3f} epochs consumed")
            if e.weighting:
                lines.extend(_weighting_lines(e.weighting))
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """Histograms of rows per batch and padding fraction per batch (all epochs), to a PNG."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as err:
            raise SpeechpackError("--plot needs matplotlib: pip install 'speechpack[plot]'") from err
        rows = np.concatenate([e.rows for e in self.epochs])
        longest = np.concatenate([e.longest for e in self.epochs])
        fill = np.concatenate([_fill(e) for e in self.epochs])
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
        a.hist(rows, bins=50)
        a.set_xlabel("rows per batch")
        a.set_ylabel("batches")
        b.hist(1 - fill, bins=50)
        cropped = any(e.cropped for e in self.epochs)
        b.set_xlabel("cropped fraction of the batch's frames" if cropped else "padding fraction of the batch")
        fig.suptitle(f"{self.state}: {len(rows)} batches, longest up to {int(longest.max()) if len(longest) else 0}")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


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


def _fill(e: EpochStats) -> np.ndarray:
    return e.fill if e.fill is not None else np.ones(len(e.rows))


def plan_report(config: dict | LoaderConfig, state: str = "train", *, world_size: int = 1, epochs: int = 1,
                seed: int = 0) -> PlanReport:
    """Plan ``epochs`` epochs of every rank, reading only the packs' indexes: the same ``plan_epoch`` the training
    loader runs, without torch's DataLoader."""
    if world_size < 1 or epochs < 1:
        raise SpeechpackError(f"world size and epochs must be at least 1, got {world_size}, {epochs}")
    if not isinstance(config, LoaderConfig):
        config = LoaderConfig.from_dict(config)
    prepared = prepare(config, state, [open_pack(source.path) for source in config.packs], seed)
    builder = prepared.builder
    cropped = bool(getattr(builder, "crops_to_shortest", False))
    windows = builder.windows
    unit_pack = prepared.item_pack if windows is None else prepared.item_pack[windows.item]
    packs = [source.path for source in config.packs]
    per_pack = np.bincount(unit_pack, minlength=len(packs))
    report = PlanReport(state=state, world_size=world_size, units=builder.num_units(),
                        unit_name="items" if windows is None else "train-window chunks")
    for epoch in range(epochs):
        lengths = epoch_lengths(builder, epoch)  # the same every epoch, unless chunks move (ASD jitter)
        plans: list[EpochPlan] = [
            plan_epoch(builder.args, seed, epoch, rank, world_size, num_units=builder.num_units(), lengths=lengths,
                       windows=windows, weighting=prepared.weighting) for rank in range(world_size)]
        rows, longest, fills, used = [], [], [], np.zeros(len(packs))
        real = offered = 0
        for plan in plans:
            for b in range(len(plan)):
                items, valid = plan.batch(b)
                lens = lengths[items]
                rows.append(len(items))
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
        stats = EpochStats(epoch=epoch, batches_per_rank=len(plans[0]), rows=rows_a, longest=longest_a, real=real,
                           padded_elements=int((rows_a * longest_a).sum()), padded_items=plans[0].padded,
                           dropped_items=plans[0].dropped,
                           pack_epochs={p: float(used[i] / per_pack[i]) if per_pack[i] else 0.0
                                        for i, p in enumerate(packs)}, weighting=weighting,
                           fill=np.asarray(fills), cropped=cropped, offered=offered)
        report.epochs.append(stats)
    return report


__all__ = ["PlanReport", "plan_report"]
