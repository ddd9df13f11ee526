"""Training straight from object storage: speechpack from a store, speechpack on a local copy, MosaicML Streaming and
LitData, side by side in one run, on the same samples, the same store behind the same throttled path, the same
cache limit.

    flock /tmp/speechpack-bench.lock python bench/stream_throughput.py [--scale 1] [--latency-ms 20]
        [--bandwidth-mbs 200] [--cache-fractions 0.1 0.25 0] [--steps 0 50] [--orders default windows]
        [--codecs pcm16 flac] [--shard-mb 16] [--workers 2] [--epochs 2] [--jobs ...]
    flock /tmp/speechpack-bench.lock python bench/stream_throughput.py --quick
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

**The matrix.**  For every training step of ``--steps`` (ms per batch), every speechpack pack of ``--codecs``
(``pcm16`` with per-segment digests, ``flac``: both read a segment at a time from the store, ``loader.cache.ranges``;
``--jobs ... speechpack-whole`` adds a pcm16 pack without digests, read a whole stream file at a time as before
format 1.4) and every order of ``--orders`` (``default``: the whole-epoch shuffle; ``windows``: shard windows), the
local copy once, then the store at every cache limit of ``--cache-fractions`` (of the pcm16 pack; 0: no cache, read
through); MosaicML Streaming and LitData once per limit (they have one order and no codec).  Each row reports
mixtures/s, the ratio to the local copy of the same pack, order and step, and the bytes and requests per epoch
(the proxy counts both).  ``--quick``: a short configuration (``--scale 0.25 --shard-mb 1 --epochs 1``, pcm16, the
default order, 25 %, no step, speechpack only) for a check during development.

**Reading** (``peers.py``'s readers: shuffled epoch, a random 2 s window per line, TSE batches of 8 mixtures):

- ``speechpack-store``: ``build_loader`` on ``s3://.../<pack>`` with ``cache: {dir, limit}`` (and the shard-window
  order in the ``windows`` rows) when this speechpack has the node cache (``speechpack.loader.cache``); a
  speechpack without it cannot train from a URL, and the row says why it failed;
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
store, with block digests (its batches read their samples' segments by ranges; ``--no-digests``: whole stream
files); the time from ``build_loader`` on its URL, with an empty cache, to epoch 0's first batch (best and median of
``--repeats`` fresh processes; ``--pack DIR`` builds the pack there once and reuses it); each run also reports
the training process's CPU time and its workers' (the load of a shared machine changes wall times much more than
CPU times).  ``--phases`` adds the start-up steps, from the ``build_loader`` call (wall, and the training process's
CPU, all its threads); it imports ``speechpack.loader`` before the clock starts, which a plain run times.  Figures
and their reading: ``docs/performance.md``, "Streaming from object storage".
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
JOBS = ("speechpack-local", "speechpack-store", "mds-store", "litdata-store", "speechpack-whole")
TARGET_RATIO = 0.9  # speechpack from the store against the local copy, cache at 25 % of the pack
TARGET_FETCHED = 1.05  # bytes fetched per epoch over the pack's bytes
TARGET_FIRST_BATCH_S = 2.0  # first batch from a cold cache, 1M samples
FORMAT = {"speechpack-local": "speechpack", "speechpack-store": "speechpack", "mds-store": "mds",
          "litdata-store": "litdata", "speechpack-whole": "speechpack"}


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
    if spec.get("shard_order"):  # shard windows: the same plan option on the local copy and from the store
        config["dataset_args"] = {**config["dataset_args"], "shard_window": spec["window"]}
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


#: ``--phases``: the start-up steps timed in the child, (module, attribute, label); a label with ``{0}`` names the
#: call's second argument (the file a fetch reads).
PHASES = (
    ("speechpack.loader.config:LoaderConfig", "from_dict", "config parsed (the task's modules imported)"),
    ("speechpack.loader.pack.object_store:ObjectStorePackFiles", "_connect", "store client: s3fs imported, made"),
    ("speechpack.loader.cache.cached_files:CachedPackFiles", "read_manifest",
     "dataset.json (the client's session) and the columns fetched"),
    ("speechpack.loader.cache.cached_files", "fetch_verified", "  fetch {0}"),
    ("speechpack.loader.cache.cached_files", "fetch_inflated", "  fetch and inflate {0}"),
    ("speechpack.loader.pack.reader", "read_columns", "columns handed to the reader"),
    ("speechpack.loader.pack.reader:Pack", "__init__", "Pack: segment tables split, column values checked"),
    ("speechpack.loader.torch", "prepare", "the task's items (prepare)"),
    ("speechpack.loader.cache.schedule:PlanFeed", "check",
     "cache check: a bound of one batch (segments), else the schedule of epoch 0"),
    ("speechpack.loader.cache.schedule:PlanFeed", "start_pass",
     "the pass's schedule (a window's, read by ranges), its first batch fetched"),
    ("speechpack.loader.cache.schedule:PlanFeed", "prefetch", "the first batch's files fetched"),
)


def _timed_phases(marks: list) -> None:
    """Wrap the ``PHASES`` calls so that each appends (label, start, end, process CPU at start and end, thread name)
    to ``marks`` (this process only: a forked worker's calls are not sent back)."""
    import functools
    import importlib
    import threading
    pid = os.getpid()
    for where, attr, label in PHASES:
        module, _, owner = where.partition(":")
        try:
            obj = importlib.import_module(module)
            obj = getattr(obj, owner) if owner else obj
            original = getattr(obj, attr)
        except (ImportError, AttributeError):
            continue  # a speechpack without that step

        def timed(*args, _f=original, _label=label, **kwargs):
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return _f(*args, **kwargs)
            finally:
                if os.getpid() == pid:
                    name = _label.format(*(str(a) for a in args[1:2])) if "{0}" in _label else _label
                    marks.append((name, start, time.perf_counter(), cpu, time.process_time(),
                                  threading.current_thread().name))
        setattr(obj, attr, functools.wraps(original)(timed))


def child(spec: dict) -> dict:
    """Build the job's loader, time its first batch and epochs; the proxy's counter gives the bytes fetched."""
    import torch
    from throttled_proxy import ByteCounter
    torch.set_num_threads(1)
    counter = ByteCounter(spec["counter"])
    job = spec["job"]
    marks: list = []
    if spec.get("phases"):
        _timed_phases(marks)
    before, asked = counter.value(), counter.requests()
    started, cpu_started = time.perf_counter(), time.process_time()
    if job == "speechpack-local":
        epoch = _speechpack(spec, spec["local"])
    elif job in ("speechpack-store", "first-batch"):
        extra = {"dataset_args": spec["dataset_args"]} if job == "first-batch" else None
        epoch = _speechpack(spec, spec["url"], extra)
    else:
        epoch = _peer(spec)
    # A training run's first batch is epoch 0's (the epoch whose schedule the loader's start-up check builds); the
    # throughput jobs warm up on epoch 1 and time the epochs after it.
    batches = epoch(0 if job == "first-batch" else 1)
    rows = len(next(batches)["key"])
    result = {"first_batch_s": time.perf_counter() - started, "first_batch_bytes": counter.value() - before,
              "first_batch_cpu_s": time.process_time() - cpu_started, "workers_cpu_s": _children_cpu()}
    if job == "first-batch":
        result["phases"] = [(name, a - started, b - started, c - cpu_started, d - cpu_started, thread)
                            for name, a, b, c, d, thread in marks]
        return result
    rows += _consume(batches, spec.get("step_s", 0.0))
    result.update(warmup_s=time.perf_counter() - started, warmup_bytes=counter.value() - before,
                  warmup_mixtures=rows // SPEAKERS, epochs=[])
    for number in range(2, spec["epochs"] + 2):
        before, asked, started = counter.value(), counter.requests(), time.perf_counter()
        rows = _consume(epoch(number), spec.get("step_s", 0.0))
        result["epochs"].append({"seconds": time.perf_counter() - started, "bytes": counter.value() - before,
                                 "requests": counter.requests() - asked, "mixtures": rows // SPEAKERS})
    return result


def _children_cpu() -> float:
    """CPU seconds (user and system) the live child processes of this one (the DataLoader workers) have used."""
    total = 0.0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as fp:
                pids = fp.read().split()
        except OSError:
            return float("nan")  # not Linux, or no /proc
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as fp:
                    fields = fp.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


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

def _job_spec(args, workdir: str, job: str, counter, cache_limit: int, expected: int, pack: str, step_ms: float,
              order: str) -> dict:
    from factories.s3 import BUCKET
    return {"job": job, "url": f"s3://{BUCKET}/{pack}", "local": os.path.join(workdir, pack),
            "cache_dir": tempfile.mkdtemp(prefix=f"cache-{job}-", dir=workdir), "cache_limit": cache_limit,
            "workers": args.workers, "seed": args.seed, "epochs": args.epochs, "counter": counter.path,
            "expected": expected, "shard_order": order == "windows" and FORMAT[job] == "speechpack",
            "window": args.window,
            "step_s": step_ms / 1000}


def write_speechpack_variant(list_path: str, out: str, shard: int, codec: str, digests: bool) -> str | None:
    """The bench's speechpack pack: pcm16 (with per-segment digests: sample-granular reads from a store) or a
    compressed codec (always with digests).  None when written; else why this speechpack cannot write it."""
    import dataclasses
    from speechpack.packer.build.run import BuildOptions
    fields = {f.name for f in dataclasses.fields(BuildOptions)}
    options = {}
    if codec != "pcm16":
        if "codec" not in fields:
            return "this speechpack's build has no codec option (format 1.4 codecs: wt-codec)"
        options["codec"] = codec
    elif digests and "digests" in fields:
        options["digests"] = True
    elif digests:
        return "this speechpack's build has no digests option (format 1.4: wt-codec)"
    from speechpack.packer.adapters.wesep import build_wesep
    build_wesep(list_path, BuildOptions(out=out, workers=1, progress=False, shard_bytes=shard, **options))
    return None


def run_throughput(args, workdir: str) -> list[dict]:
    from loader_throughput import build_corpus
    lines = max(BATCH, int(LINES_PER_SCALE * args.scale) // BATCH * BATCH)
    list_path, corpus = build_corpus(workdir, lines, args.seed, PIECE_SECONDS)
    _log(f"corpus: {lines} lines of 2 speakers, {corpus['min_s']:.1f}-{corpus['max_s']:.1f} s "
         f"({corpus['hours'] * 60:.1f} min of mixtures, {corpus['unique_mixtures']} unique of "
         f"{corpus['recordings']} real recordings)")
    shard = int(args.shard_mb * 1e6)
    peers_wanted = [job for job in ("mds-store", "litdata-store") if job in args.jobs]
    names = {}  # pack name on disk and store -> (codec, digests)
    for codec in args.codecs:
        names[f"speechpack-{codec}"] = (codec, codec != "pcm16" or args.digests)
    if "speechpack-whole" in args.jobs:
        names["speechpack-whole"] = ("pcm16", False)
    sizes, refused = {}, {}
    for name, (codec, digests) in names.items():
        why = write_speechpack_variant(list_path, os.path.join(workdir, name), shard, codec, digests)
        if why:
            refused[name] = why
            _log(f"  {name:<17} not written: {why}")
            continue
        sizes[name] = peers.dir_bytes(os.path.join(workdir, name))
        _log(f"  {name:<17} {sizes[name] / 1e6:7.1f} MB in shards of {args.shard_mb:g} MB")
    if peers_wanted:
        items = peers.read_corpus(list_path)
        for name, write in (("mds", peers.write_mds), ("litdata", peers.write_litdata)):
            if f"{name}-store" in peers_wanted:
                write(items, os.path.join(workdir, name), shard)
                sizes[name] = peers.dir_bytes(os.path.join(workdir, name))
                _log(f"  {name:<17} {sizes[name] / 1e6:7.1f} MB in shards of {args.shard_mb:g} MB")
        del items
    server, proxy, counter, env = _start_store(workdir, args)
    rows = []
    try:
        from factories.s3 import BUCKET
        for name in sizes:
            _upload(os.path.join(workdir, name), f"s3://{BUCKET}/{name}")
        reference = sizes.get("speechpack-pcm16") or next(iter(sizes.values()))
        for step_ms in args.steps:
            for name in [n for n in names if n in sizes]:
                codec = names[name][0]
                for order in args.orders:
                    if "speechpack-local" in args.jobs:
                        rows.append(_run_job(args, workdir, "speechpack-local", counter, 0, lines, name, step_ms,
                                             order, None, sizes[name], env))
                    for fraction in args.cache_fractions:
                        limit = int(fraction * reference)
                        jobs = ["speechpack-store"] if name != "speechpack-whole" else ["speechpack-store"]
                        if codec == args.codecs[0] and order == args.orders[0] and name != "speechpack-whole" \
                                and fraction > 0:
                            jobs += peers_wanted  # the peers have one order and no codec: once per limit
                        for job in jobs:
                            if "speechpack-store" not in args.jobs and job == "speechpack-store":
                                continue
                            pack = FORMAT[job] if job != "speechpack-store" else name
                            rows.append(_run_job(args, workdir, job, counter, limit, lines, pack, step_ms, order,
                                                 fraction, sizes[pack], env))
        return rows
    finally:
        _stop_store(server, proxy)


def _run_job(args, workdir, job, counter, limit, lines, pack, step_ms, order, fraction, pack_bytes, env) -> dict:
    spec = _job_spec(args, workdir, job, counter, limit, lines, pack, step_ms, order)
    got = run_child(spec, env, args.timeout)
    got.update(job=job, pack=pack, pack_bytes=pack_bytes, lines=lines, step_ms=step_ms,
               order=order if FORMAT[job] == "speechpack" else "-", fraction=fraction)
    _log(_row_line(got) + (f"\n{got['log']}" if "error" in got and args.verbose else ""))
    return got


def _stop_store(server, proxy) -> None:
    proxy.stdin.close()
    proxy.wait(timeout=30)
    server.__exit__(None, None, None)


def _label(row: dict) -> str:
    where = "local copy" if row["job"] == "speechpack-local" else (
        "no cache" if not row["fraction"] else f"cache {row['fraction']:.0%}")
    return f"{row['job']} [{row['pack']}, {row['order']}, {where}, step {row['step_ms']:g} ms]"


def _rate(row: dict) -> float:
    return row["lines"] / statistics.median(e["seconds"] for e in row["epochs"])


def _row_line(row: dict) -> str:
    if "error" in row:
        return f"  {_label(row)} FAILED: {row['error']}"
    fetched = [e["bytes"] / row["pack_bytes"] for e in row["epochs"]]
    return (f"  {_label(row)}: {_rate(row):,.0f} mixtures/s (epochs "
            f"{', '.join(format(e['seconds'], '.2f') for e in row['epochs'])} s); fetched per epoch "
            f"{', '.join(format(f, '.2f') for f in fetched)}x the pack in "
            f"{', '.join(str(e.get('requests', '-')) for e in row['epochs'])} requests, warm-up "
            f"{row['warmup_bytes'] / row['pack_bytes']:.2f}x; first batch {row['first_batch_s']:.2f} s; mixtures "
            f"per epoch {row['epochs'][0]['mixtures']}")


def report(rows: list[dict], args) -> str:
    out = [f"\n{args.latency_ms:g} ms, {args.bandwidth_mbs:g} MB/s, {args.workers} workers, shards of "
           f"{args.shard_mb:g} MB, batches of {BATCH}; cache limits are fractions of the pcm16 speechpack pack",
           "| job | pack | order | cache | step | mixtures/s | / local copy | fetched per epoch / pack | requests per "
           "epoch | first batch |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    local = {(r["pack"], r["order"], r["step_ms"]): _rate(r) for r in rows
             if r["job"] == "speechpack-local" and "error" not in r}
    any_local = {r["step_ms"]: _rate(r) for r in rows if r["job"] == "speechpack-local" and "error" not in r
                 and r["order"] == args.orders[0]}
    verdicts = []
    for r in rows:
        where = "local" if r["job"] == "speechpack-local" else ("none" if not r["fraction"] else f"{r['fraction']:.0%}")
        if "error" in r:
            out.append(f"| {r['job']} | {r['pack']} | {r['order']} | {where} | {r['step_ms']:g} ms | failed: "
                       f"{r['error']} | | | | |")
            continue
        rate = _rate(r)
        base = local.get((r["pack"], r["order"], r["step_ms"])) or any_local.get(r["step_ms"])
        fetched = statistics.median(e["bytes"] for e in r["epochs"]) / r["pack_bytes"]
        asked = statistics.median(e.get("requests", 0) for e in r["epochs"])
        out.append(f"| {r['job']} | {r['pack']} | {r['order']} | {where} | {r['step_ms']:g} ms | {rate:,.0f} | "
                   f"{rate / base:.2f} | {fetched:.2f}x | {asked:,.0f} | {r['first_batch_s']:.2f} s |"
                   if base else f"| {r['job']} | {r['pack']} | {r['order']} | {where} | {r['step_ms']:g} ms | "
                   f"{rate:,.0f} | - | {fetched:.2f}x | {asked:,.0f} | {r['first_batch_s']:.2f} s |")
        if r["job"] == "speechpack-store" and r["order"] == "default" and r["fraction"] == 0.25 and base:
            verdicts.append(f"verdict [{r['pack']}, step {r['step_ms']:g} ms]: default order from the store at 25 % "
                            f"cache at {rate / base:.2f} of the local copy (target >= {TARGET_RATIO} with a step): "
                            f"{'PASS' if rate / base >= TARGET_RATIO else 'BELOW TARGET'}; fetched per epoch "
                            f"{fetched:.2f}x the pack (target <= {TARGET_FETCHED}x): "
                            f"{'PASS' if fetched <= TARGET_FETCHED else 'ABOVE TARGET'}")
    return "\n".join(out + verdicts)


def run_first_batch(args, workdir: str) -> None:
    from loader_throughput import CHUNK_LEN, build_tiny_pack
    pack = args.pack or os.path.join(workdir, "first")
    if args.pack and os.path.isfile(os.path.join(pack, "dataset.json")):
        size = peers.dir_bytes(pack)
        _log(f"pack: {pack} as built before ({size / 1e6:.0f} MB; --pack)")
    else:
        seconds = build_tiny_pack(pack, args.samples, args.seed, int(args.shard_mb * 1e6), args.digests)
        size = peers.dir_bytes(pack)
        _log(f"pack: {args.samples:,} tiny samples{' with digests' if args.digests else ''}, {size / 1e6:.0f} MB in "
             f"shards of {args.shard_mb:g} MB "
             f"(written in {seconds:.1f} s)")
    server, proxy, counter, env = _start_store(workdir, args)
    try:
        from factories.s3 import BUCKET
        _upload(pack, f"s3://{BUCKET}/first")
        limit = int((args.cache_fraction if args.cache_fraction is not None else 0.25) * size)
        times = []
        for _ in range(args.repeats):
            spec = {"job": "first-batch", "url": f"s3://{BUCKET}/first", "workers": args.workers, "seed": args.seed,
                    "cache_dir": tempfile.mkdtemp(prefix="cache-first-", dir=workdir), "cache_limit": limit,
                    "counter": counter.path,
                    "dataset_args": {"chunk_len": CHUNK_LEN, "batch_size": BATCH, "shuffle": True},
                    "phases": args.phases}
            load = os.getloadavg()[0]
            got = run_child(spec, env, args.timeout)
            if "error" in got:
                _log(f"  first batch FAILED: {got['error']}\n{got['log']}")
                return
            times.append(got["first_batch_s"])
            _log(f"  first batch {got['first_batch_s']:.2f} s, {got['first_batch_bytes'] / 1e6:.1f} MB fetched; CPU "
                 f"{got.get('first_batch_cpu_s', float('nan')):.2f} s in the training process, "
                 f"{got.get('workers_cpu_s', float('nan')):.2f} s in its workers (load {load:.1f} at the start)")
            for name, start, end, cpu_start, cpu_end, thread in got.get("phases", []):
                where = "" if thread == "MainThread" else f"  [{thread}]"
                _log(f"    {start:6.3f}-{end:6.3f} s  ({end - start:5.3f} s; process CPU meanwhile "
                     f"{cpu_end - cpu_start:5.3f} s)  {name}{where}")
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
    parser.add_argument("--cache-fractions", type=float, nargs="+", default=[0.1, 0.25, 0.0],
                        help="cache limits as fractions of the pcm16 speechpack pack (0: no cache, speechpack reads "
                             "through; the peers need one and skip it)")
    parser.add_argument("--cache-fraction", type=float, help="one cache fraction (as --cache-fractions F)")
    parser.add_argument("--shard-mb", type=float, default=16.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=float, nargs="+", default=[0.0, 50.0],
                        help="training steps per batch (ms), slept in the training process (0: read as fast as "
                             "possible)")
    parser.add_argument("--step-ms", type=float, help="one training step (as --steps MS)")
    parser.add_argument("--orders", nargs="+", choices=("default", "windows"), default=["default", "windows"],
                        help="speechpack's epoch order: the default whole-epoch shuffle, or shard windows")
    parser.add_argument("--shard-order", action="store_true", help="as --orders windows")
    parser.add_argument("--window", type=int, default=16, help="shards per window in the windows order "
                        "(dataset_args.shard_window)")
    parser.add_argument("--codecs", nargs="+", choices=("pcm16", "flac"), default=["pcm16", "flac"],
                        help="speechpack packs to read (each with digests: sample-granular reads)")
    parser.add_argument("--no-digests", dest="digests", action="store_false",
                        help="the pcm16 pack without digests (whole stream files fetched, as before format 1.4)")
    parser.add_argument("--quick", action="store_true",
                        help="a short run: --scale 0.25 --shard-mb 1 --epochs 1, pcm16, default order, 25 %% "
                             "cache, no step, speechpack only")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs after the warm-up epoch")
    parser.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS))
    parser.add_argument("--first-batch", action="store_true", help="only the time to the first batch, 1M samples")
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3, help="--first-batch: fresh processes")
    parser.add_argument("--pack", help="--first-batch: the tiny pack's directory, built there once and reused by later "
                                       "runs (building 1M samples takes minutes)")
    parser.add_argument("--phases", action="store_true",
                        help="--first-batch: time each start-up step in the child (from build_loader; wall and the "
                             "training process's CPU) and print them per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per job")
    parser.add_argument("--tmp-dir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="print a failed job's error output")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.scale, args.shard_mb, args.epochs = 0.25, 1.0, 1
        args.codecs, args.orders, args.cache_fractions, args.steps = ["pcm16"], ["default"], [0.25], [0.0]
        args.jobs = [j for j in args.jobs if j in ("speechpack-local", "speechpack-store")]
    if args.cache_fraction is not None:
        args.cache_fractions = [args.cache_fraction]
    if args.step_ms is not None:
        args.steps = [args.step_ms]
    if args.shard_order:
        args.orders = ["windows"]
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
