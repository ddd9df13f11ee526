"""The one way speechpack's pictures get matplotlib (the optional ``plot`` extra), and the axis rules they share.

``inspect --plot``, ``plan --plot``, ``validate --plot`` and the demo draw with matplotlib, which a plain install
leaves out: each asks here, so the message that says how to install it, and the non-interactive backend (pictures
are written to files, often on machines without a display), are the same everywhere.  Imported lazily, inside
functions: matplotlib is never loaded by packing or training.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from speechpack.schemas.errors import SpeechpackError

#: The extra that installs matplotlib, as a user types it.
PLOT_INSTALL = "pip install 'speechpack[plot]'"


def plotting_available() -> bool:
    """Whether matplotlib can be imported (the demo draws its pictures only then, and says so otherwise)."""
    return importlib.util.find_spec("matplotlib") is not None


def pyplot(what: str = "--plot") -> Any:
    """``matplotlib.pyplot`` on the file-only Agg backend; a ``SpeechpackError`` naming ``what`` and the install
    command when the extra is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise SpeechpackError(f"{what} needs matplotlib: {PLOT_INSTALL}") from err
    return plt



def save_figure(figure: Any, path: str, what: str = "--plot") -> None:
    """Write ``figure`` to the PNG ``path`` and free it (pyplot keeps every open figure alive until closed)."""
    figure.savefig(path)
    pyplot(what).close(figure)


def integer_axis(axis: Any) -> None:
    """Ticks at whole numbers only, on an axis that counts things (samples, speakers, batches, shard numbers)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def duration_unit(seconds: float) -> tuple[str, float]:
    """The unit a duration axis reads best in, for values up to ``seconds``: ``(name, seconds per unit)``, hours
    from one hour up, minutes from one minute, else seconds (a demo speaker's 0.004 h is 14 s)."""
    if seconds >= 3600:
        return "hours", 3600.0
    if seconds >= 60:
        return "minutes", 60.0
    return "seconds", 1.0


def duration_text(seconds: float) -> str:
    """A total duration for a title, in the unit it reads best in (``18 seconds``, where hours rounded a small pack
    to ``0.01 h``; ``1,234 hours``)."""
    unit, per_unit = duration_unit(seconds)
    value = seconds / per_unit
    return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"


def fitted_edges(arrays: list, bins: int, margin: float, default: tuple[float, float]) -> Any:
    """``bins + 1`` shared histogram edges over the range the finite values of ``arrays`` span, ``margin`` beyond
    either end (a fixed axis, such as -90..0 dBFS, squeezes real data into a sliver); ``default`` when none is
    finite."""
    import numpy as np

    finite = [a[np.isfinite(a)] for a in (np.asarray(a, dtype=np.float64) for a in arrays)]
    finite = [a for a in finite if a.size]
    if not finite:
        return np.linspace(default[0], default[1], bins + 1)
    return np.linspace(min(a.min() for a in finite) - margin, max(a.max() for a in finite) + margin, bins + 1)


def path_labels(paths: list[str]) -> list[str]:
    """Each path's name on a plot: its last part, with as many parent directories as it takes to tell the paths
    apart (``/data/a/train`` and ``/data/b/train``: ``a/train``, ``b/train``); the paths as given when nothing does."""
    parts = [os.path.normpath(str(p)).strip(os.sep).split(os.sep) for p in paths]
    for depth in range(1, max((len(p) for p in parts), default=1) + 1):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(p) for p in paths]


__all__ = ["PLOT_INSTALL", "duration_text", "duration_unit", "fitted_edges", "integer_axis", "path_labels", "plotting_available",
           "pyplot", "save_figure"]
