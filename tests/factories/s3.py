"""A real S3-protocol server (moto's server mode) on a free loopback port, restartable, and the small real-speech pack
the object-storage tests publish to it, with how they publish a pack and name its URL; never the network.

moto is imported at module level: where it is missing the tests that use it fail (the ``dev`` extra installs it),
never skip.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator

import pytest
from moto.server import ThreadedMotoServer

from factories.wesep_lists import Mix
from speechpack.loader.pack import open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.copy.to_directory import copy_pack

#: Fake credentials, set in the environment as a user would: they must never appear in output or in a pack.
SECRET = "speechpack-test-secret-4f1c9e"
BUCKET = "speechpack-test"


class S3Server:
    """moto's S3 server on a loopback port chosen once, so it can be stopped and started again at the same
    endpoint (an outage in the middle of training); its objects live in this process's moto backends and survive a
    restart."""

    def __init__(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server = None

    def start(self) -> None:
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        self.server.stop()


@contextlib.contextmanager
def s3_server_running() -> Iterator[S3Server]:
    """Start the server, put credentials and endpoint in the environment (botocore's standard chain; no AWS config
    file of the machine is read, and no node cache directory of the user's), make ``BUCKET``, and yield the
    server."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server()
    server.start()
    patch = pytest.MonkeyPatch()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "SPEECHPACK_CACHE_DIR"):
        patch.delenv(name, raising=False)
    patch.setenv("AWS_ACCESS_KEY_ID", "speechpack-test-key")
    patch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    patch.setenv("AWS_CONFIG_FILE", os.devnull)
    patch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    patch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    try:
        import fsspec

        try:
            fsspec.filesystem("s3", skip_instance_cache=True).mkdir(BUCKET)
        except FileExistsError:  # moto's backends live in the process: a server started before made it
            pass
        yield server
    finally:
        patch.undo()
        server.stop()


def s3_url(name: str) -> str:
    """The URL of ``name`` in the test bucket (each test module publishes under names of its own)."""
    return f"s3://{BUCKET}/{name}"


def publish(local, name: str) -> str:
    """Copy the pack at ``local`` to :func:`s3_url` of ``name``; its URL."""
    url = s3_url(name)
    copy_pack(str(local), url, progress=False)
    return url


def stream_bytes(local) -> int:
    """Bytes of a pack's stream files (what a node cache holds of it when every shard is fetched)."""
    return sum(f.size for shard in open_pack(local).manifest.shards for f in shard.files.values())


def make_store_test_pack(tmp_path, wesep_list, real_audio):
    """Three real mixtures (one stereo) and a broken line skipped, in shards of 150 kB: the pack the object-storage
    tests publish."""
    librivox = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("m1", tuple(librivox[:2])), Mix("m2", tuple(librivox[1:3]), layout="stereo"),
                       Mix("m3", (librivox[0], librivox[2])), '{"key": "broken"'])
    out = tmp_path / "src"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=150_000, skip_bad=True, progress=False))
    return out


def flip_object_byte(url: str, rel: str, at: int | None = None) -> None:
    """Flip one bit of object ``rel`` of the pack at ``url`` on the store (its middle byte by default): a file
    corrupted where it lies, its size unchanged."""
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    data = bytearray(fs.cat_file(f"{url}/{rel}"))
    data[len(data) // 2 if at is None else at] ^= 0x01
    fs.pipe_file(f"{url}/{rel}", bytes(data))
