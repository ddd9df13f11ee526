"""``speechpack plan --plot``: the dry run's batches as two histograms, items per batch and the fraction of each
batch that is padding (or, for builders that crop to the shortest item, the fraction cropped).

Both axes are drawn as what they are: item counts are whole numbers, one bar per count; a fraction runs from 0 to
1, whatever the data (a plan without padding shows one bar at 0, not an axis centred on it).

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
    longest = np.concatenate([e.longest for e in report.epochs])
    fill = np.concatenate([e.fill if e.fill is not None else np.ones(len(e.items)) for e in report.epochs])
    cropped = any(e.cropped for e in report.epochs)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    sizes, counts = np.unique(items, return_counts=True)
    a.bar(sizes, counts, width=0.8)
    low, high = (int(sizes.min()), int(sizes.max())) if len(sizes) else (0, 1)
    a.set(xlim=(low - 1, high + 1), xlabel="items per batch", ylabel="batches", title="batch sizes")
    integer_axis(a.xaxis)
    integer_axis(a.yaxis)
    b.hist(np.clip(1 - fill, 0.0, 1.0), bins=FRACTION_BINS, range=(0.0, 1.0))
    b.set(xlim=(0.0, 1.0), xlabel="cropped fraction of the batch's frames" if cropped else
          "padded fraction of the batch's frames", ylabel="batches", title="cropping" if cropped else "padding")
    integer_axis(b.yaxis)
    fig.suptitle(f"{report.state}: {plural(len(items), 'batch')} over {plural(len(report.epochs), 'epoch')}, "
                 f"longest item {int(longest.max()) if len(longest) else 0} samples")
    fig.tight_layout()
    return fig


__all__ = ["plan_figure", "plot_plan"]
