"""What the ``export lhotse`` tests share: an asr-jsonl manifest over real clips (FLAC and float-WAV samples, mono
and stereo), and ``speechpack export lhotse`` run in a fresh process where a kill point can stop it
(``packer.build.state``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile

from speechpack.packer.build.state import FAULT_ENV, KILL_AT_ENV

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def asr_export_manifest(tmp_path: Path, real_audio) -> str:
    """An asr-jsonl manifest over real clips (``real_audio``: the fixture): 16 kHz librivox, a 48 kHz ALSA prompt
    (resampled), a stereo file, and a float WAV pushed past full scale (stored rescaled, exported as float WAV)."""
    clips = real_audio("pocketsphinx", 2)
    alsa = real_audio("alsa", 1)[0]
    first, second = (soundfile.read(p, dtype="int16")[0] for p in clips)
    frames = min(len(first), len(second))
    soundfile.write(tmp_path / "stereo.wav", np.stack([first[:frames], second[:frames]]).T, 16000)
    loud, rate = soundfile.read(clips[1], dtype="float32")
    soundfile.write(tmp_path / "loud.wav", loud * 4.0, rate, subtype="FLOAT")
    lines = [{"key": "clip", "audio_filepath": clips[0], "text": "and mister john", "language": "en",
              "corpus": "librivox", "speaker": "narrator", "session": 3},
             {"key": "alsa", "audio_filepath": alsa, "text": "front centre", "language": "en", "corpus": "alsa"},
             {"key": "stereo", "audio_filepath": str(tmp_path / "stereo.wav"), "text": "two", "language": "fr",
              "corpus": "librivox", "speaker": "duo"},
             {"key": "loud", "audio_filepath": str(tmp_path / "loud.wav"), "text": "loud", "language": "en",
              "corpus": "librivox"}]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def run_export(pack, out, *extra: str, kill_at: str | None = None,
               fault: str | None = None) -> subprocess.CompletedProcess:
    """``speechpack export lhotse PACK --out OUT`` in a fresh process and session (a Ctrl-C it simulates reaches
    only its own process group), with SIGINT's default action as at a terminal (a test run started in the
    background inherits SIGINT ignored, and Python then never raises KeyboardInterrupt)."""
    env = {k: v for k, v in os.environ.items() if k not in (KILL_AT_ENV, FAULT_ENV)}
    if kill_at is not None:
        env[KILL_AT_ENV] = kill_at
    if fault is not None:
        env[FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "speechpack.cli", "export", "lhotse", str(pack), "--out", str(out), *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, start_new_session=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def entries(root: Path) -> list[str]:
    """Every entry under ``root`` (directories too), relative, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


__all__ = ["REPO", "asr_export_manifest", "entries", "run_export"]
