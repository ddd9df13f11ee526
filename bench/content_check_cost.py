"""What checking stream files' content costs in the first epoch and after (``loader.pack.content_check``).

    flock /tmp/speechpack-bench.lock python bench/content_check_cost.py [--lines 640] [--repeats 3]

Builds the throughput corpus of ``bench/loader_throughput.py`` (real recordings, 2-speaker mixtures, WeSep raw
list of ``--lines`` lines) into a pack, reads its files once (warm page cache), then times one training epoch
(``build_loader``, num_workers=0, 4 s chunks, batch 16) per ``verify_streams`` mode:

- ``off``: no content check (the reader before this feature);
- ``first-map``, no records: the first epoch on a node; every stream file is hashed on the background thread
  while batches are served; the epoch's wall time and the CPU time of the process (both threads) are reported,
  and how long after the epoch the last hash finished;
- ``first-map``, records present: every later open on the node (the steady state);
- ``every-open``: each file hashed before its first read.

Best wall time of ``--repeats`` runs each (records removed before each "no records" run).  Figures and their
reading: docs/performance.md, "Checking stream content".
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loader_throughput import build_corpus, loader_config, pack_files, speechpack_epoch, warm_files  # noqa: E402

from speechpack.loader.config import LoaderConfig  # noqa: E402
from speechpack.loader.pack import open_pack  # noqa: E402
from speechpack.loader.torch import SpeechLoader  # noqa: E402
from speechpack.packer.adapters.wesep import build_wesep  # noqa: E402
from speechpack.packer.build.run import BuildOptions  # noqa: E402
from speechpack.loader.pack.content_check import cache_root  # noqa: E402


def one_epoch(pack: str, mode: str, fresh: bool) -> dict:
    if fresh:
        shutil.rmtree(cache_root(), ignore_errors=True)  # no record: every file is hashed again
    config = LoaderConfig.from_dict({**loader_config(pack, 16), "verify_streams": mode}, state="train")
    wall, cpu = time.perf_counter(), time.process_time()
    opened = open_pack(pack, verify=mode)
    speech = SpeechLoader(config, "train", [opened], rank=0, world_size=1, num_workers=0, seed=0)
    mixtures = speechpack_epoch(speech, 0)
    epoch_wall, epoch_cpu = time.perf_counter() - wall, time.process_time() - cpu
    opened.checks.wait()
    settled = time.perf_counter() - wall
    return {"wall": epoch_wall, "cpu": epoch_cpu, "settled": settled, "cpu_all": time.process_time() - cpu,
            "mixtures": mixtures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=640)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="content-check-") as work:
        os.environ["XDG_CACHE_HOME"] = os.path.join(work, "cache")  # the records this run writes, and only those
        list_path, facts = build_corpus(work, args.lines, seed=0)
        pack = os.path.join(work, "pack")
        build_wesep(list_path, BuildOptions(out=pack, progress=False))
        files = pack_files(pack)
        stream_bytes = sum(os.path.getsize(p) for p in files if p.endswith(".npy") and "shard-" in p)
        warm_files(files)
        print(f"pack: {facts['lines']} mixtures, {facts['hours']:.2f} h, stream files {stream_bytes / 1e6:.0f} MB "
              f"in {sum(1 for p in files if p.endswith('.npy') and 'shard-' in p)} files")
        runs = (("off", "off", False), ("first-map, no records", "first-map", True),
                ("first-map, records present", "first-map", False), ("every-open", "every-open", False))
        for label, mode, fresh in runs:
            best = min((one_epoch(pack, mode, fresh) for _ in range(args.repeats)), key=lambda r: r["wall"])
            print(f"{label:28s} epoch wall {best['wall']:.3f} s, CPU {best['cpu']:.3f} s; all checks done "
                  f"{best['settled']:.3f} s after the start (CPU {best['cpu_all']:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
