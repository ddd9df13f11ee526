"""Named points of a build (or an export) where a test can kill it, to prove that a rerun recovers from any of them.

``SPEECHPACK_KILL_AT=<point>`` makes the build process SIGKILL itself when it reaches ``<point>``: no clean-up
handler runs, exactly as when a cluster scheduler kills a job.  Points (``K`` a planned shard number):

``sample:<key>``   the sample was appended to its shard (the shard is half written, under ``.tmp-``)
``shard:<K>``      shard K was renamed into place, before its receipt was written
``receipt-temp:<K>``  shard K's receipt is written under its ``.tmp-`` name, not yet renamed
``receipt:<K>``    shard K's receipt was written
``columns``        ``columns/`` (and ``skipped.json``) are in place, ``dataset.json`` is not
``manifest``       ``dataset.json`` is in place, the build state (``.tmp-plan.json``, receipts) is not yet removed

and of ``speechpack export lhotse`` (``packer.export.output_dir``; ``I`` a sample number):

``export-audio:<I>``  sample I's audio file was renamed into place, its journal line is not yet written
``export-cuts``    every audio file is journaled and ``.tmp-cuts.jsonl.gz`` written, nothing committed yet
``export-commit``  ``cuts.jsonl.gz`` and ``speechpack-export.json`` are in place, the plan and journal not yet removed

``SPEECHPACK_FAULT`` chooses what happens there instead of SIGKILL (for the failure tests of issue 13):

``interrupt``  SIGINT to the whole process group, as Ctrl-C at a terminal sends it (run the build in its own
               session so that the test runner is not part of the group)
``enospc``     ``OSError(ENOSPC)`` raised at the point, as a full disk raises it in the writer

Deterministic where sleeps and timers are not: the kill happens at the same byte of the pack in every run.
Unset (the normal case) this costs one dictionary lookup per point.
"""

from __future__ import annotations

import errno
import os
import signal
import time

#: The environment variable that names the kill point.
KILL_AT_ENV = "SPEECHPACK_KILL_AT"
#: The environment variable that names the fault to inject there (default: SIGKILL).
FAULT_ENV = "SPEECHPACK_FAULT"
#: How long an interrupted process waits for its SIGINT to arrive (it is delivered asynchronously).
_INTERRUPT_GRACE_SECONDS = 5.0


def checkpoint(point: str) -> None:
    """Kill this process with SIGKILL (or inject ``SPEECHPACK_FAULT``) if ``point`` is the one
    ``SPEECHPACK_KILL_AT`` names."""
    if os.environ.get(KILL_AT_ENV) != point:
        return
    fault = os.environ.get(FAULT_ENV, "kill")
    if fault == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"<injected at {point}>")
    if fault == "interrupt":
        os.killpg(0, signal.SIGINT)
        time.sleep(_INTERRUPT_GRACE_SECONDS)  # the build process gets it now; a worker ignores it and goes on
        return
    os.kill(os.getpid(), signal.SIGKILL)
