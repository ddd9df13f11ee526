"""What ``open_pack`` costs, step by step, in CPU seconds (best of ``--repeats``; warm page cache).

    python bench/open_pack_cost.py PACK [--repeats 7]

CPU time (``time.process_time``) rather than wall time, because a loaded machine inflates it far less.  Steps:
reading the column files, their sha256 (what ``open_pack`` compares with ``dataset.json``), the value checks of
``schemas/columns.py``, and the whole ``open_pack``.  The big synthetic pack of
``bench/loader_throughput.py`` (``--big-pack DIR``) is the 1M-sample pack ``docs/format.md`` reports on.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from speechpack.loader.pack import Pack, open_pack, read_manifest  # noqa: E402
from speechpack.loader.pack.files import DirectoryPackFiles  # noqa: E402
from speechpack.loader.pack.verify import read_columns  # noqa: E402
from speechpack.schemas.columns import check_column_values  # noqa: E402
from speechpack.schemas.constants import COLUMNS_DIR  # noqa: E402
from speechpack.schemas.kinds import column_files  # noqa: E402


def best_cpu(step, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        step()
        best = min(best, time.process_time() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pack")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    manifest = read_manifest(args.pack)
    paths = [os.path.join(args.pack, COLUMNS_DIR, name) for name in column_files(manifest.kind)]

    def read_all() -> list[bytes]:
        result = []
        for path in paths:
            with open(path, "rb") as fp:
                result.append(fp.read())
        return result

    data = read_all()
    columns = read_columns(DirectoryPackFiles(args.pack), manifest)
    pack = Pack(args.pack, manifest, columns)
    steps = {
        "read the column files": read_all,
        f"sha256 of {sum(map(len, data)) / 1e6:.0f} MB of columns": lambda: [hashlib.sha256(d).digest() for d in data],
        "value checks": lambda: check_column_values(manifest, pack.shard, pack.speaker_first, pack.speaker_count,
                                                    len(pack.speakers), pack.streams, COLUMNS_DIR),
        "whole open_pack": lambda: open_pack(args.pack),
    }
    print(f"{args.pack}: {manifest.num_samples:,} samples, CPU seconds, best of {args.repeats}")
    for name, step in steps.items():
        print(f"  {name:<36} {best_cpu(step, args.repeats):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
