"""Named points of a build where a test can kill it, to prove that ``--resume`` recovers from any of them.

``SPEECHPACK_KILL_AT=<point>`` makes the build process SIGKILL itself when it reaches ``<point>``: no clean-up
handler runs, exactly as when a cluster scheduler kills a job.  Points (``K`` a planned shard number):

``sample:<key>``   the sample was appended to its shard (the shard is half written, under ``.tmp-``)
``shard:<K>``      shard K was renamed into place, before its receipt was written
``receipt:<K>``    shard K's receipt was written
``columns``        ``columns/`` (and ``skipped.json``) are in place, ``dataset.json`` is not
``manifest``       ``dataset.json`` is in place, the build state (``.tmp-plan.json``, receipts) is not yet removed

Deterministic where sleeps and timers are not: the kill happens at the same byte of the pack in every run.
Unset (the normal case) this costs one dictionary lookup per point.
"""

from __future__ import annotations

import os
import signal

#: The environment variable that names the kill point.
KILL_AT_ENV = "SPEECHPACK_KILL_AT"


def checkpoint(point: str) -> None:
    """Kill this process with SIGKILL if ``point`` is the one ``SPEECHPACK_KILL_AT`` names."""
    if os.environ.get(KILL_AT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
