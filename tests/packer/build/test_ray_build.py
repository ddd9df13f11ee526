"""``--executor ray``: one Ray task per planned shard, each writing its shard where it runs, gives the pack the
local executor gives, byte for byte (also with skipped lines, slices and resume).  A local Ray instance
(``ray.init(num_cpus=2)``), started once for the module: Ray's start-up costs seconds."""

from __future__ import annotations

import functools
import json
import os
import sys

import numpy as np
import pytest

from factories import Mix, mixture_line, pack_files
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions, finalize_pack
from speechpack.packer.build.plan import ShardSlice
from speechpack.schemas.errors import BuildError, SpeechpackError

try:
    import ray
except ImportError:  # the optional extra: scripts/test.sh installs it
    ray = None

SHARD_BYTES = 100_000


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module; without the ``ray`` extra, skip locally and fail in CI."""
    if ray is None:
        message = "Ray is not installed: pip install 'speechpack[ray]' (scripts/test.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def corpus(real_audio, wesep_list, make_wav):
    """Seven real two-speaker mixtures (16 kHz and 48 kHz sources) and one line holding NaN (a decode-time
    problem) in the middle: four shards."""
    ps = real_audio("pocketsphinx", 3)
    alsa = real_audio("alsa", 2)
    case = wesep_list([Mix(f"utt{i}", tuple(alsa) if i == 5 else (ps[i % 3], ps[(i + 1) % 3]), seconds=0.5,
                           start=0.2 + 0.05 * i) for i in range(7)])
    nan = make_wav("nan.wav", subtype="FLOAT", data=np.where(np.arange(8000) == 4000, np.nan, 0.1).astype(np.float32))
    lines = [json.dumps(line.record) for line in case.lines]
    lines.insert(3, json.dumps(mixture_line("nan", [nan], {name: [nan] for name in case.lines[0].record["src"]})))
    case.list_path.write_text("\n".join(lines) + "\n")
    return case.list_path


def build(list_path, out, **options):
    return build_wesep(str(list_path), BuildOptions(out=str(out), shard_bytes=SHARD_BYTES, progress=False,
                                                    **options))


def test_ray_pack_equals_local_pack(local_ray, corpus, tmp_path):
    local = build(corpus, tmp_path / "local", skip_bad=True)
    on_ray = build(corpus, tmp_path / "ray", skip_bad=True, executor="ray")
    assert len(local.manifest.shards) == 4 and on_ray.built == 4
    assert [p.key for p in on_ray.skipped] == ["nan"]
    one, two = pack_files(tmp_path / "local"), pack_files(tmp_path / "ray")
    assert sorted(one) == sorted(two)
    for name in one:
        assert one[name] == two[name], f"{name} differs between --executor local and --executor ray"


def test_ray_slices_and_resume(local_ray, corpus, tmp_path):
    """Array jobs on Ray, one of them run twice (resumed: it keeps its shards), then finalize."""
    build(corpus, tmp_path / "local", skip_bad=True)
    out = tmp_path / "sliced"
    build(corpus, out, skip_bad=True, executor="ray", shards=ShardSlice(0, 2))
    again = build(corpus, out, skip_bad=True, executor="ray", shards=ShardSlice(0, 2), resume=True)
    assert (again.kept, again.built) == (2, 0)
    build(corpus, out, skip_bad=True, executor="ray", shards=ShardSlice(1, 2))
    finalize_pack(str(out))
    assert pack_files(out) == pack_files(tmp_path / "local")


def test_ray_bad_line_without_skip_bad_fails_and_leaves_nothing(local_ray, corpus, tmp_path):
    out = tmp_path / "pack"
    with pytest.raises(BuildError) as caught:
        build(corpus, out, executor="ray")
    assert [(p.line, p.key) for p in caught.value.problems] == [(4, "nan")]
    assert not out.exists()


def test_ray_address_needs_the_ray_executor(tmp_path):
    with pytest.raises(SpeechpackError, match="--ray-address only applies with --executor ray"):
        BuildOptions(out=str(tmp_path), ray_address="auto")


def test_missing_ray_is_a_clear_error(corpus, tmp_path, monkeypatch):
    """Without the optional dependency the build says what to install, after planning and before writing."""
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(SpeechpackError, match=r"pip install 'speechpack\[ray\]'"):
        build(corpus, tmp_path / "pack", skip_bad=True, executor="ray")
    assert not (tmp_path / "pack").exists()


class DiskOnFire(RuntimeError):
    pass


def explode(item):
    """A ``load`` that fails the way a bug or a full disk does (not bad input: no ``AudioError``)."""
    raise DiskOnFire(f"writing {item.key}: disk on fire")


def test_a_failing_task_fails_the_build_with_its_error(local_ray, corpus, tmp_path):
    from speechpack.packer.adapters.wesep_lines import plan_wesep_sample, read_wesep_list
    from speechpack.packer.build.run import run_build

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not importable in Ray's workers
    lines = read_wesep_list(str(corpus)).lines
    out = tmp_path / "pack"
    with pytest.raises(DiskOnFire, match="disk on fire"):
        run_build(items=lines, problems=[], plan=functools.partial(plan_wesep_sample, sample_rate=16000),
                  load=explode, kind="tse", input_path=str(corpus), command="build wesep", recorded_options={},
                  options=BuildOptions(out=str(out), shard_bytes=SHARD_BYTES, executor="ray", progress=False))
    assert not out.exists()
