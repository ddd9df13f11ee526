"""``speechpack export lhotse`` interrupted and run again: a kill, Ctrl-C or a full disk anywhere, then the same
command, gives the same bytes as an uninterrupted export, keeping the audio files that verify; a directory holding
a user's files is refused and left untouched; a finished export is replaced only with ``--overwrite``, and then
only what its record lists is removed.

Exports that must stop run in subprocesses stopped at a named point (``SPEECHPACK_KILL_AT``, ``SPEECHPACK_FAULT``:
``packer.build.state``): deterministic, no sleeps.  Real recordings."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from factories import pack_files
from factories.lhotse_export import asr_export_manifest, entries, run_export
from speechpack.packer.export.lhotse import export_lhotse
from speechpack.packer.export.record import JOURNAL_FILE, PLAN_FILE, RECORD_FILE, REPLACED_FILE, ExportRecord, record_owner
from speechpack.schemas.errors import SpeechpackError

#: The four samples' audio files (``asr_export_manifest``): FLAC at scale 1, float WAV for the rescaled one.
AUDIO = ["audio/00000/00000000.flac", "audio/00000/00000001.flac", "audio/00000/00000002.flac",
         "audio/00000/00000003.wav"]


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def asr_pack(tmp_path, real_audio):
    """A four-sample asr pack of real clips (mono and stereo FLAC samples, a float-WAV one)."""
    pack = tmp_path / "pack"
    result = cli("build", "asr-jsonl", "--list", asr_export_manifest(tmp_path, real_audio), "--out", str(pack),
                 "--no-progress")
    assert result.exit_code == 0, result.output
    return pack


@pytest.fixture
def reference(asr_pack, tmp_path):
    """The bytes of an uninterrupted export into ``tmp_path/export``, which is then removed for the test's own."""
    out = tmp_path / "export"
    result = cli("export", "lhotse", str(asr_pack), "--out", str(out))
    assert result.exit_code == 0, result.output
    files = pack_files(out)
    assert sorted(files) == sorted(AUDIO + ["cuts.jsonl.gz", RECORD_FILE])
    shutil.rmtree(out)
    return files


def identities(out, rels) -> dict[str, tuple[int, int]]:
    return {rel: ((out / rel).stat().st_ino, (out / rel).stat().st_mtime_ns) for rel in rels}


@pytest.mark.parametrize("kill_at, kept", [
    ("export-audio:0", 0),  # the first file in place, not yet journaled: written again
    ("export-audio:2", 2),
    ("export-cuts", 4),  # every file journaled, the manifest under its .tmp- name
    ("export-commit", 4),  # committed, the plan and the journal not yet removed
])
def test_killed_anywhere_the_rerun_gives_the_same_bytes(asr_pack, reference, tmp_path, kill_at, kept):
    out = tmp_path / "export"
    killed = run_export(asr_pack, out, kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (out / PLAN_FILE).exists()
    assert (out / "cuts.jsonl.gz").exists() == (kill_at == "export-commit")
    journaled = AUDIO[:kept]
    before = identities(out, journaled)
    rerun = run_export(asr_pack, out)
    assert rerun.returncode == 0, rerun.stderr
    assert "holds an unfinished export of the same pack: finishing it" in rerun.stderr
    assert (f"({kept} audio file(s) of an earlier run verified and kept)" in rerun.stdout) == bool(kept)
    assert pack_files(out) == reference
    assert identities(out, journaled) == before  # kept as they were, not rewritten


def test_a_journaled_file_that_no_longer_verifies_is_written_again(asr_pack, reference, tmp_path):
    out = tmp_path / "export"
    assert run_export(asr_pack, out, kill_at="export-audio:3").returncode == -signal.SIGKILL
    (out / AUDIO[1]).write_bytes((out / AUDIO[1]).read_bytes()[:100])  # cut short, as by a crash
    (out / AUDIO[2]).write_bytes(b"x" * (out / AUDIO[2]).stat().st_size)  # same size, other bytes
    (out / "audio/00000/.tmp-00000003.wav").write_bytes(b"RIFF")  # as a kill while writing it leaves
    rerun = run_export(asr_pack, out)
    assert rerun.returncode == 0, rerun.stderr
    assert "(1 audio file(s) of an earlier run verified and kept)" in rerun.stdout
    assert pack_files(out) == reference


def test_ctrl_c_prints_aborted_and_leaves_only_what_the_rerun_uses(asr_pack, reference, tmp_path):
    out = tmp_path / "export"
    interrupted = run_export(asr_pack, out, kill_at="export-audio:2", fault="interrupt")
    assert interrupted.returncode == 1, interrupted.stderr
    assert interrupted.stderr.strip().endswith("Aborted!"), interrupted.stderr
    assert "Traceback" not in interrupted.stderr
    # file 2 was in place but not journaled: removed; no .tmp- file, no manifest
    assert entries(out) == sorted([PLAN_FILE, JOURNAL_FILE, "audio", "audio/00000", *AUDIO[:2]])
    rerun = run_export(asr_pack, out)
    assert rerun.returncode == 0, rerun.stderr
    assert pack_files(out) == reference


def test_ctrl_c_before_any_file_is_kept_leaves_nothing(asr_pack, tmp_path):
    out = tmp_path / "export"
    interrupted = run_export(asr_pack, out, kill_at="export-audio:0", fault="interrupt")
    assert interrupted.returncode == 1 and interrupted.stderr.strip().endswith("Aborted!"), interrupted.stderr
    assert not out.exists()  # the export created it


def test_full_disk_prints_an_error_and_the_rerun_finishes(asr_pack, reference, tmp_path):
    out = tmp_path / "export"
    failed = run_export(asr_pack, out, kill_at="export-audio:1", fault="enospc")
    assert failed.returncode == 1, failed.stderr
    assert failed.stderr.startswith("error: ") and "No space left on device" in failed.stderr
    assert "the 1 audio file(s) it finished are kept: run the same command again" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert entries(out) == sorted([PLAN_FILE, JOURNAL_FILE, "audio", "audio/00000", AUDIO[0]])
    assert run_export(asr_pack, out).returncode == 0
    assert pack_files(out) == reference


def test_an_unreadable_pack_is_an_error_and_leaves_nothing(asr_pack, tmp_path):
    out = tmp_path / "export"
    (asr_pack / "shard-000000" / "audio.npy").unlink()
    result = cli("export", "lhotse", str(asr_pack), "--out", str(out))
    assert result.exit_code == 1 and result.output.startswith("error: ") and "audio.npy" in result.output
    assert not out.exists()
    (asr_pack / "dataset.json").write_text("{")
    result = cli("export", "lhotse", str(asr_pack), "--out", str(out))
    assert result.exit_code == 1 and "dataset.json" in result.output and not out.exists()


@pytest.mark.parametrize("with_export", [False, True])
def test_a_directory_holding_a_users_files_is_refused_and_untouched(asr_pack, tmp_path, with_export):
    out = tmp_path / "export"
    if with_export:  # an unfinished export, then the user adds a file in its audio folder
        assert run_export(asr_pack, out, kill_at="export-audio:2").returncode == -signal.SIGKILL
    (out / "audio" / "00000").mkdir(parents=True, exist_ok=True)
    (out / "notes.txt").write_text("mine")
    (out / "audio" / "00000" / "mine.flac").write_bytes(b"not speechpack's")
    before = pack_files(out), entries(out)
    for extra in ([], ["--overwrite"]):
        result = cli("export", "lhotse", str(asr_pack), "--out", str(out), *extra)
        assert result.exit_code == 1
        assert "holds files that no speechpack export record lists" in result.output
        assert "notes.txt" in result.output and "audio/00000/mine.flac" in result.output
        assert (pack_files(out), entries(out)) == before


def test_what_an_earlier_version_left_is_refused(asr_pack, tmp_path):
    """An export interrupted before exports kept records (audio files and ``.tmp-cuts.jsonl.gz``, no plan): no
    record lists those files, so they are not deleted."""
    out = tmp_path / "export"
    (out / "audio" / "00000").mkdir(parents=True)
    (out / "audio" / "00000" / "00000000.flac").write_bytes(b"flac")
    (out / ".tmp-cuts.jsonl.gz").write_bytes(b"gz")
    result = cli("export", "lhotse", str(asr_pack), "--out", str(out))
    assert result.exit_code == 1 and "audio/00000/00000000.flac" in result.output
    assert entries(out) == [".tmp-cuts.jsonl.gz", "audio", "audio/00000", "audio/00000/00000000.flac"]


def test_a_finished_export_is_replaced_only_with_overwrite(asr_pack, reference, tmp_path, real_audio):
    out = tmp_path / "export"
    assert cli("export", "lhotse", str(asr_pack), "--out", str(out)).exit_code == 0
    again = cli("export", "lhotse", str(asr_pack), "--out", str(out))
    assert again.exit_code == 1 and "holds a finished export of" in again.output and "--overwrite" in again.output
    assert pack_files(out) == reference
    assert cli("export", "lhotse", str(asr_pack), "--out", str(out), "--overwrite").exit_code == 0
    assert pack_files(out) == reference
    # replaced by an export of a smaller pack: the old files it does not list go
    small = tmp_path / "small"
    noise = real_audio("alsa")[4]
    (tmp_path / "bank.list").write_text(noise + "\n")
    assert cli("build", "audio-bank", "--kind", "noise", str(tmp_path / "bank.list"), "--out", str(small),
               "--no-progress").exit_code == 0
    assert cli("export", "lhotse", str(small), "--out", str(out), "--overwrite").exit_code == 0
    assert entries(out) == sorted(["audio", "audio/00000", AUDIO[0], "cuts.jsonl.gz", RECORD_FILE])


def test_an_unfinished_export_of_another_pack_is_discarded_only_with_overwrite(asr_pack, tmp_path, real_audio):
    out = tmp_path / "export"
    assert run_export(asr_pack, out, kill_at="export-audio:3").returncode == -signal.SIGKILL
    before = pack_files(out)
    other = tmp_path / "other"
    (tmp_path / "bank.list").write_text(real_audio("alsa")[4] + "\n")
    assert cli("build", "audio-bank", "--kind", "noise", str(tmp_path / "bank.list"), "--out", str(other),
               "--no-progress").exit_code == 0
    with pytest.raises(SpeechpackError, match="holds an unfinished export of another pack"):
        export_lhotse(str(other), str(out))
    assert pack_files(out) == before
    assert export_lhotse(str(other), str(out), overwrite=True).cuts == 1
    assert entries(out) == sorted(["audio", "audio/00000", AUDIO[0], "cuts.jsonl.gz", RECORD_FILE])


def test_an_interrupted_overwrite_is_finished_by_the_next_export(asr_pack, reference, tmp_path):
    """``--overwrite`` renames the old record first; killed while removing what it lists, the next export (without
    ``--overwrite``: the user asked for it already) removes the rest, then exports."""
    out = tmp_path / "export"
    export_lhotse(str(asr_pack), str(out))
    os.replace(out / RECORD_FILE, out / REPLACED_FILE)  # where --overwrite stands after its first step
    (out / "cuts.jsonl.gz").unlink()
    (out / AUDIO[3]).unlink()
    assert export_lhotse(str(asr_pack), str(out)).kept == 0
    assert pack_files(out) == reference


def test_a_plan_cut_short_owns_nothing(asr_pack, reference, tmp_path):
    """Killed while writing its plan, an export had written nothing else: the plan is replaced.  Beside audio files,
    the same plan vouches for none of them: they are refused, not deleted."""
    out = tmp_path / "export"
    out.mkdir()
    (out / PLAN_FILE).write_text('{"format": "speechpack-ex')
    assert cli("export", "lhotse", str(asr_pack), "--out", str(out)).exit_code == 0
    assert pack_files(out) == reference
    shutil.rmtree(out)
    (out / "audio" / "00000").mkdir(parents=True)
    (out / PLAN_FILE).write_text('{"format": "speechpack-ex')
    (out / AUDIO[0]).write_bytes(b"flac")
    result = cli("export", "lhotse", str(asr_pack), "--out", str(out))
    assert result.exit_code == 1 and AUDIO[0] in result.output and (out / AUDIO[0]).read_bytes() == b"flac"


def test_a_second_export_into_the_same_directory_is_refused(asr_pack, tmp_path):
    """Refused at once, touching nothing: the empty directory it made stays for the lock's holder to write into."""
    out = tmp_path / "export"
    fd = os.open(str(out) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a running export holds it
        result = cli("export", "lhotse", str(asr_pack), "--out", str(out))
    finally:
        os.close(fd)
    assert result.exit_code == 1 and "another speechpack process is writing there" in result.output
    assert out.is_dir() and not os.listdir(out)


def test_records_own_the_planned_names_only():
    """Ownership from the sample count alone: 1001 samples are two audio folders, the second with one file."""
    owns = record_owner(ExportRecord(pack="/p", pack_manifest_sha256="0" * 64, samples=1001), plan=False)
    assert all(owns(rel) for rel in ["cuts.jsonl.gz", ".tmp-cuts.jsonl.gz", "audio", "audio/00000", "audio/00001",
                                     "audio/00000/00000999.flac", "audio/00001/00001000.wav",
                                     "audio/00001/.tmp-00001000.flac"])
    assert not any(owns(rel) for rel in ["audio/00002", "audio/00001/00001001.flac", "audio/00000/00001000.flac",
                                         "audio/00000/00000001.mp3", "audio/0000", "audio/00000/x/00000001.flac",
                                         JOURNAL_FILE, RECORD_FILE, "notes.txt"])
    assert record_owner(ExportRecord(pack="/p", pack_manifest_sha256="0" * 64, samples=1), plan=True)(JOURNAL_FILE)
