"""Training straight from object storage: speechpack from a store, speechpack on a local copy, MosaicML Streaming and
LitData, side by side in one run, on the same samples, the same store behind the same throttled path, the same
cache limit.

    flock /tmp/speechpack-bench.lock python bench/stream_throughput.py [--scale 1] [--latency-ms 20]
        [--bandwidth-mbs 200] [--cache-fraction 0.25] [--shard-mb 16] [--workers 2] [--epochs 2] [--jobs ...]
    flock /tmp/speechpack-bench.lock python bench/stream_throughput.py --first-batch [--samples 1000000]
        [--repeats 3]

The peers are benchmark-only installs (``bench/peers.py`` has the pip lines that keep torch 2.13.0).

**The store.** A real S3-protocol server on loopback (moto's server mode, started as ``tests/factories/s3.py``
starts it for the tests), reached by every reader only through :mod:`throttled_proxy` (a process of its own):
``--latency-ms`` per request, ``--connect-ms`` per new connection, ``--bandwidth-mbs`` shared by all connections,
every byte sent counted.  Each reader gets the proxy as its endpoint (``AWS_ENDPOINT_URL``; Streaming reads
``S3_ENDPOINT_URL``).  The run starts with a check of the path: a 64 MiB GET and 1 MiB GETs straight from the
server and through the proxy (moto's own rate bounds every reader).

**The corpus.** ``build_corpus`` of ``bench/loader_throughput.py`` (real 16 kHz speech from Debian packages, two
speakers per line, 2-5 s), ``--scale 1`` = 960 lines, about 320 MB of int16 (mixture and both sources).  The same
samples are written as a speechpack ``tse`` pack, MDS shards and LitData chunks by ``bench/peers.py``'s writers,
all three cut at ``--shard-mb`` (Streaming refuses a cache limit under four shards, so at 25 % of a 320 MB pack
shards must stay under 20 MB), and published to the store.

**Reading** (``peers.py``'s readers: shuffled epoch, a random 2 s window per line, TSE batches of 8 mixtures):

- ``speechpack-store``: ``build_loader`` on ``s3://.../speechpack`` with ``cache: {dir, limit}`` (and
  ``shard_order: true`` with ``--shard-order``) when this speechpack has the node cache (``speechpack.loader.cache``);
  a speechpack without it cannot train from a URL, and the row says why it failed;
- ``speechpack-local``: the same loader on the local copy of the pack (the baseline of the ratios);
- ``mds-store``: ``StreamingDataset(remote=, local=, cache_limit=)``;
- ``litdata-store``: ``StreamingDataset(input_dir=url, cache_dir=, max_cache_size=)``.

``--step-ms`` makes the training process sleep that long after every batch, standing for the model's step: read as
fast as possible (0), the local copy delivers over 1 GB/s of pack data, which no store link carries; with a step
the question is whether the store keeps up with training.  Every job runs in a fresh process with an empty cache
directory: the time from building its loader to its first
batch (a cold cache), the rest of that epoch (the warm-up), then ``--epochs`` timed epochs: mixtures/s (median),
the ratio to the local copy, and the bytes the proxy sent during each epoch over the job's own pack bytes.

**--first-batch**: a ``sources`` pack of ``--samples`` tiny samples (``loader_throughput.build_tiny_pack``) on the
store; the time from ``build_loader`` on its URL, with an empty cache, to the first batch (best and median of
``--repeats`` fresh processes; ``--pack DIR`` builds the pack there once and reuses it).  Figures and their
reading: ``docs/performance.md``, "Streaming from object storage".
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
sys.path.insert(0, REPO)

import peers  # noqa: E402  (bench/ is not a package)
from peers import BATCH, SPEAKERS  # noqa: E402

LINES_PER_SCALE = 960
PIECE_SECONDS = (2.0, 5.0)
JOBS = ("speechpack-local", "speechpack-store", "mds-store", "litdata-store")
TARGET_RATIO = 0.9  # speechpack from the store against the local copy, cache at 25 % of the pack
TARGET_FETCHED = 1.05  # bytes fetched per epoch over the pack's bytes
TARGET_FIRST_BATCH_S = 2.0  # first batch from a cold cache, 1M samples
FORMAT = {"speechpack-local": "speechpack", "speechpack-store": "speechpack", "mds-store": "mds",
          "litdata-store": "litdata"}


def _log(text: str) -> None:
    print(text, flush=True)


def has_node_cache() -> bool:
    """Whether this speechpack reads URL packs through a bounded node cache (``cache: {dir, limit}``)."""
    return importlib.util.find_spec("speechpack.loader.cache") is not None


# ------------------------------------------------------------------------------------------ one job (child process)

def _speechpack(spec: dict, location: str, config_extra: dict | None = None):
    from speechpack.loader import build_loader
    config = {**peers.speechpack_config(location), **(config_extra or {})}
    if location.startswith("s3://") and has_node_cache():
        config["cache"] = {"dir": spec["cache_dir"], "limit": spec["cache_limit"]}
        if spec.get("shard_order"):
            config["cache"]["shard_order"] = True
    loader = build_loader(config, "train", num_workers=spec["workers"], seed=spec["seed"])

    def epoch(number: int):
        loader.set_epoch(number)
        return iter(loader)
    return epoch


def _peer(spec: dict):
    job, cache = spec["job"], spec["cache_dir"]
    if job == "mds-store":
        options = {"remote": spec["url"], "cache_limit": spec["cache_limit"]}
    else:
        from litdata.streaming import downloader
        # The loopback store speaks plain http, which LitData's obstore client refuses unless told (a real store is
        # https); the client options are LitData's own, allow_http added.
        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"
        options = {"input_dir": spec["url"], "cache_dir": cache, "max_cache_size": spec["cache_limit"]}
    loader = peers.peer_dataloader(FORMAT[job], cache, spec["workers"], spec["seed"], **options)
    return lambda _number: iter(loader)


def child(spec: dict) -> dict:
    """Build the job's loader, time its first batch and epochs; the proxy's counter gives the bytes fetched."""
    import torch
    from throttled_proxy import ByteCounter
    torch.set_num_threads(1)
    counter = ByteCounter(spec["counter"])
    job = spec["job"]
    before = counter.value()
    started = time.perf_counter()
    if job == "speechpack-local":
        epoch = _speechpack(spec, spec["local"])
    elif job in ("speechpack-store", "first-batch"):
        extra = {"dataset_args": spec["dataset_args"]} if job == "first-batch" else None
        epoch = _speechpack(spec, spec["url"], extra)
    else:
        epoch = _peer(spec)
    batches = epoch(1)
    rows = len(next(batches)["key"])
    result = {"first_batch_s": time.perf_counter() - started, "first_batch_bytes": counter.value() - before}
    if job == "first-batch":
        return result
    rows += _consume(batches, spec.get("step_s", 0.0))
    result.update(warmup_s=time.perf_counter() - started, warmup_bytes=counter.value() - before,
                  warmup_mixtures=rows // SPEAKERS, epochs=[])
    for number in range(2, spec["epochs"] + 2):
        before, started = counter.value(), time.perf_counter()
        rows = _consume(epoch(number), spec.get("step_s", 0.0))
        result["epochs"].append({"seconds": time.perf_counter() - started, "bytes": counter.value() - before,
                                 "mixtures": rows // SPEAKERS})
    return result


def _consume(batches, step_s: float) -> int:
    """Rows of an epoch; ``step_s`` per batch stands for the training step (the GPU's time, during which the
    loader's workers and fetches go on)."""
    rows = 0
    for batch in batches:
        rows += len(batch["key"])
        if step_s:
            time.sleep(step_s)
    return rows


def run_child(spec: dict, env: dict, timeout: float) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fp:
        json.dump(spec, fp)
    # A session of its own, so that a stalled job is stopped with its DataLoader workers and the peers' threads.
    job = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", fp.name], cwd=REPO, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # a reader that stalls (a cache too small for it) is a result too
        os.killpg(job.pid, signal.SIGKILL)
        stdout, stderr = job.communicate()
        return {"error": f"no result within {timeout:g} s", "log": stderr[-3000:]}
    finally:
        os.unlink(fp.name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)  # workers the job left behind (it ends with os._exit)
    results = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if job.returncode != 0 or not results:
        return {"error": (stderr.strip().splitlines() or [f"exit status {job.returncode}"])[-1][:300],
                "log": stderr[-3000:]}
    return json.loads(results[-1][len("RESULT "):])


# ------------------------------------------------------------------------------------------ the store

def _start_store(workdir: str, args):
    """Start the server and the proxy; returns (server context, proxy, counter, child environment)."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from factories.s3 import s3_server_running
    from throttled_proxy import ByteCounter
    server = s3_server_running()
    try:  # a failure before the caller holds the server stops it (its thread would keep this process alive)
        endpoint = server.__enter__().endpoint  # the running ``S3Server``
        path = os.path.join(workdir, "fetched.bin")
        proxy = subprocess.Popen([sys.executable, os.path.join(BENCH, "throttled_proxy.py"), "--upstream-port",
                                  endpoint.rsplit(":", 1)[1], "--latency-ms", str(args.latency_ms), "--connect-ms",
                                  str(args.connect_ms), "--bandwidth-mbs", str(args.bandwidth_mbs), "--counter", path],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        port = int(proxy.stdout.readline().split()[1])
        counter = ByteCounter(path)
        proxied = f"http://127.0.0.1:{port}"
        env = {**os.environ, "AWS_ENDPOINT_URL": proxied, "S3_ENDPOINT_URL": proxied,
               "AWS_ALLOW_HTTP": "true",  # obstore (LitData) refuses a plain-http endpoint otherwise
               "PYTHONUNBUFFERED": "1"}
        _log(f"store: moto S3 server at {endpoint}, readers through the proxy on port {port} "
             f"({args.latency_ms:g} ms per request, {args.connect_ms:g} ms per connection, {args.bandwidth_mbs:g} MB/s "
             f"shared)")
        _calibrate(endpoint, f"http://127.0.0.1:{port}", counter)
        return server, proxy, counter, env
    except BaseException:
        server.__exit__(None, None, None)
        raise


def _calibrate(direct: str, proxied: str, counter) -> None:
    """What the path itself delivers: one 64 MiB object and 16 objects of 1 MiB, straight from the server and
    through the proxy (the server's own rate bounds every reader)."""
    import boto3
    from factories.s3 import BUCKET
    clients = {"server": boto3.client("s3", endpoint_url=direct), "proxy": boto3.client("s3", endpoint_url=proxied)}
    clients["server"].put_object(Bucket=BUCKET, Key="calibrate/big", Body=os.urandom(64 << 20))
    for i in range(16):
        clients["server"].put_object(Bucket=BUCKET, Key=f"calibrate/small-{i}", Body=os.urandom(1 << 20))
    before = counter.value()
    for name, client in clients.items():
        started = time.perf_counter()
        client.get_object(Bucket=BUCKET, Key="calibrate/big")["Body"].read()
        big = time.perf_counter() - started
        started = time.perf_counter()
        for i in range(16):
            client.get_object(Bucket=BUCKET, Key=f"calibrate/small-{i}")["Body"].read()
        small = (time.perf_counter() - started) / 16
        _log(f"  path check, {name:<6}: one 64 MiB GET at {(64 << 20) / big / 1e6:5.0f} MB/s; 1 MiB GETs one after "
             f"another {small * 1000:5.1f} ms each")
    _log(f"  the proxy counted {(counter.value() - before) / (80 << 20):.3f}x the bytes of the objects it passed")


def _upload(local: str, url: str) -> None:
    """Publish a directory to the store directly (not through the proxy): speechpack packs with ``copy``."""
    if os.path.isfile(os.path.join(local, "dataset.json")):
        from speechpack.packer.copy.to_directory import copy_pack
        copy_pack(local, url, progress=False, log=lambda _text: None)
        return
    import fsspec
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    for root, _dirs, files in os.walk(local):
        for name in files:
            path = os.path.join(root, name)
            fs.put_file(path, url[len("s3://"):] + "/" + os.path.relpath(path, local))


# ------------------------------------------------------------------------------------------ the two modes

def _job_spec(args, workdir: str, job: str, counter, cache_limit: int, expected: int) -> dict:
    from factories.s3 import BUCKET
    return {"job": job, "url": f"s3://{BUCKET}/{FORMAT[job]}", "local": os.path.join(workdir, FORMAT[job]),
            "cache_dir": tempfile.mkdtemp(prefix=f"cache-{job}-", dir=workdir), "cache_limit": cache_limit,
            "workers": args.workers, "seed": args.seed, "epochs": args.epochs, "counter": counter.path,
            "expected": expected, "shard_order": args.shard_order, "step_s": args.step_ms / 1000}


def run_throughput(args, workdir: str) -> list[dict]:
    from loader_throughput import build_corpus
    lines = max(BATCH, int(LINES_PER_SCALE * args.scale) // BATCH * BATCH)
    list_path, corpus = build_corpus(workdir, lines, args.seed, PIECE_SECONDS)
    _log(f"corpus: {lines} lines of 2 speakers, {corpus['min_s']:.1f}-{corpus['max_s']:.1f} s "
         f"({corpus['hours'] * 60:.1f} min of mixtures, {corpus['unique_mixtures']} unique of "
         f"{corpus['recordings']} real recordings)")
    items = peers.read_corpus(list_path)
    shard = int(args.shard_mb * 1e6)
    writers = {"speechpack": lambda out: peers.write_speechpack(list_path, out, shard),
               "mds": lambda out: peers.write_mds(items, out, shard),
               "litdata": lambda out: peers.write_litdata(items, out, shard)}
    needed = {FORMAT[job] for job in args.jobs} | {"speechpack"}
    sizes = {}
    for name in sorted(needed):
        writers[name](os.path.join(workdir, name))
        sizes[name] = peers.dir_bytes(os.path.join(workdir, name))
        _log(f"  {name:<11} {sizes[name] / 1e6:7.1f} MB in shards of {args.shard_mb:g} MB")
    del items
    server, proxy, counter, env = _start_store(workdir, args)
    try:
        from factories.s3 import BUCKET
        for name in sorted(needed):
            _upload(os.path.join(workdir, name), f"s3://{BUCKET}/{name}")
        limit = int(args.cache_fraction * sizes["speechpack"])
        cache = "node cache (speechpack.loader.cache)" if has_node_cache() else \
            "NO node cache in this speechpack (speechpack.loader.cache): build_loader may refuse the URL"
        _log(f"cache limit {limit / 1e6:.1f} MB ({args.cache_fraction:.0%} of the speechpack pack) for every job; "
             f"speechpack-store: {cache}")
        rows = []
        for job in args.jobs:
            spec = _job_spec(args, workdir, job, counter, limit, lines)
            got = run_child(spec, env, args.timeout)
            got.update(job=job, pack_bytes=sizes[FORMAT[job]], lines=lines)
            rows.append(got)
            _log(_row_line(got) + (f"\n{got['log']}" if "error" in got and args.verbose else ""))
        return rows
    finally:
        _stop_store(server, proxy)


def _stop_store(server, proxy) -> None:
    proxy.stdin.close()
    proxy.wait(timeout=30)
    server.__exit__(None, None, None)


def _row_line(row: dict) -> str:
    if "error" in row:
        return f"  {row['job']:<17} FAILED: {row['error']}"
    secs = statistics.median(e["seconds"] for e in row["epochs"])
    fetched = [e["bytes"] / row["pack_bytes"] for e in row["epochs"]]
    return (f"  {row['job']:<17} {row['lines'] / secs:9,.0f} mixtures/s (epochs "
            f"{', '.join(format(e['seconds'], '.2f') for e in row['epochs'])} s); fetched per epoch "
            f"{', '.join(format(f, '.2f') for f in fetched)}x the pack, warm-up {row['warmup_bytes'] / row['pack_bytes']:.2f}x; "
            f"first batch {row['first_batch_s']:.2f} s; mixtures per epoch {row['epochs'][0]['mixtures']}")


def report(rows: list[dict], args) -> str:
    local = next((r for r in rows if r["job"] == "speechpack-local" and "error" not in r), None)
    local_rate = local and local["lines"] / statistics.median(e["seconds"] for e in local["epochs"])
    link = rows[0]["pack_bytes"] / rows[0]["lines"]
    out = [f"\n{args.latency_ms:g} ms, {args.bandwidth_mbs:g} MB/s, cache {args.cache_fraction:.0%} of the pack, "
           f"{args.workers} workers, shards of {args.shard_mb:g} MB, training step {args.step_ms:g} ms per batch of "
           f"{BATCH} (the link alone carries "
           f"{args.bandwidth_mbs * 1e6 / link:,.0f} mixtures/s of this pack)",
           "| job | mixtures/s | / local copy | fetched per epoch / pack | warm-up epoch / pack | first batch, cold cache |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['job']} | failed: {r['error']} | | | | |")
            continue
        rate = r["lines"] / statistics.median(e["seconds"] for e in r["epochs"])
        fetched = statistics.median(e["bytes"] for e in r["epochs"]) / r["pack_bytes"]
        ratio = f"{rate / local_rate:.2f}" if local_rate else "-"
        out.append(f"| {r['job']} | {rate:,.0f} | {ratio} | {fetched:.2f}x | "
                   f"{r['warmup_bytes'] / r['pack_bytes']:.2f}x | {r['first_batch_s']:.2f} s |")
    store = next((r for r in rows if r["job"] == "speechpack-store" and "error" not in r), None)
    if store and local_rate:
        rate = store["lines"] / statistics.median(e["seconds"] for e in store["epochs"])
        fetched = statistics.median(e["bytes"] for e in store["epochs"]) / store["pack_bytes"]
        out.append(f"verdict: speechpack from the store at {rate / local_rate:.2f} of the local copy (target >= "
                   f"{TARGET_RATIO}): {'PASS' if rate / local_rate >= TARGET_RATIO else 'BELOW TARGET'}; "
                   f"fetched per epoch {fetched:.2f}x the pack (target <= {TARGET_FETCHED}x): "
                   f"{'PASS' if fetched <= TARGET_FETCHED else 'ABOVE TARGET'}")
    return "\n".join(out)


def run_first_batch(args, workdir: str) -> None:
    from loader_throughput import CHUNK_LEN, build_tiny_pack
    pack = args.pack or os.path.join(workdir, "first")
    if args.pack and os.path.isfile(os.path.join(pack, "dataset.json")):
        size = peers.dir_bytes(pack)
        _log(f"pack: {pack} as built before ({size / 1e6:.0f} MB; --pack)")
    else:
        seconds = build_tiny_pack(pack, args.samples, args.seed, int(args.shard_mb * 1e6))
        size = peers.dir_bytes(pack)
        _log(f"pack: {args.samples:,} tiny samples, {size / 1e6:.0f} MB in shards of {args.shard_mb:g} MB "
             f"(written in {seconds:.1f} s)")
    server, proxy, counter, env = _start_store(workdir, args)
    try:
        from factories.s3 import BUCKET
        _upload(pack, f"s3://{BUCKET}/first")
        limit = int(args.cache_fraction * size)
        times = []
        for _ in range(args.repeats):
            spec = {"job": "first-batch", "url": f"s3://{BUCKET}/first", "workers": args.workers, "seed": args.seed,
                    "cache_dir": tempfile.mkdtemp(prefix="cache-first-", dir=workdir), "cache_limit": limit,
                    "counter": counter.path,
                    "dataset_args": {"chunk_len": CHUNK_LEN, "batch_size": BATCH, "shuffle": True}}
            got = run_child(spec, env, args.timeout)
            if "error" in got:
                _log(f"  first batch FAILED: {got['error']}\n{got['log']}")
                return
            times.append(got["first_batch_s"])
            _log(f"  first batch {got['first_batch_s']:.2f} s, {got['first_batch_bytes'] / 1e6:.1f} MB fetched")
        best = min(times)
        _log(f"first batch from a cold cache, {args.samples:,} samples, {args.workers} workers, "
             f"{'node cache' if has_node_cache() else 'no node cache'}: best {best:.2f} s, median "
             f"{statistics.median(times):.2f} s (target <= {TARGET_FIRST_BATCH_S:g} s): "
             f"{'PASS' if best <= TARGET_FIRST_BATCH_S else 'BELOW TARGET'}")
    finally:
        _stop_store(server, proxy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help=f"corpus size: {LINES_PER_SCALE} lines per unit")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--connect-ms", type=float, default=0.0,
                        help="latency per new connection (moto closes every connection: see throttled_proxy.py)")
    parser.add_argument("--bandwidth-mbs", type=float, default=200.0)
    parser.add_argument("--cache-fraction", type=float, default=0.25)
    parser.add_argument("--shard-mb", type=float, default=16.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--step-ms", type=float, default=0.0,
                        help="training step per batch, slept in the training process (0: read as fast as possible)")
    parser.add_argument("--shard-order", action="store_true",
                        help="speechpack-store: the node cache's shard-aware epoch order (cache.shard_order)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs after the warm-up epoch")
    parser.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS))
    parser.add_argument("--first-batch", action="store_true", help="only the time to the first batch, 1M samples")
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3, help="--first-batch: fresh processes")
    parser.add_argument("--pack", help="--first-batch: the tiny pack's directory, built there once and reused by later "
                                       "runs (building 1M samples takes minutes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per job")
    parser.add_argument("--tmp-dir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="print a failed job's error output")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        peers._stub_torchvision()
        with open(args.child, encoding="utf-8") as fp:
            result = child(json.load(fp))
        print("RESULT " + json.dumps(result), flush=True)
        os._exit(0)  # skip the peers' atexit clean-ups (shared memory, worker joins)
    from workdir import bench_workdir
    _log(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    with bench_workdir("stream-", args.tmp_dir, args.keep, _log) as workdir:
        if args.first_batch:
            run_first_batch(args, workdir)
        else:
            _log(report(run_throughput(args, workdir), args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
