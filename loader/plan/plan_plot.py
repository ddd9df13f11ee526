"""``speechpack plan --plot``: the dry run's batches as two histograms, the rows of each batch (what the model gets:
a TSE mixture gives one row per target speaker; items where a task has one row per item) and the fraction of each
batch that is padding (or, for builders that crop to the shortest item, the fraction cropped).

Both axes are drawn as what they are: counts are whole numbers, one bar per count; a fraction runs from 0 to 1,
whatever the data.  Batches with no padding at all are counted in the title, not drawn as a bar that would read as
"up to 5 %"; a plan where no batch is padded says so in the panel.

``report`` is a ``loader.plan.planning_report.PlanReport`` (its ``state`` and ``epochs``); this module does not
import it, so the report imports the picture and not the other way round.
"""

from __future__ import annotations

import numpy as np

from speechpack.schemas.plotting import integer_axis, pyplot, save_figure
from speechpack.schemas.units import plural

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


__all__ = ["plan_figure", "plot_plan"]
