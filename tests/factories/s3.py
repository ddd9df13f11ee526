"""A real S3-protocol server (moto's server mode) on a free loopback port, and the small real-speech pack the
object-storage tests publish to it; never the network.

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
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

#: Fake credentials, set in the environment as a user would: they must never appear in output or in a pack.
SECRET = "speechpack-test-secret-4f1c9e"
BUCKET = "speechpack-test"


@contextlib.contextmanager
def s3_server_running() -> Iterator[str]:
    """Start the server, put credentials and endpoint in the environment (botocore's standard chain; no AWS config
    file of the machine is read), make ``BUCKET``, and yield the endpoint URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    patch = pytest.MonkeyPatch()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        patch.delenv(name, raising=False)
    patch.setenv("AWS_ACCESS_KEY_ID", "speechpack-test-key")
    patch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    patch.setenv("AWS_CONFIG_FILE", os.devnull)
    patch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    patch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    try:
        import fsspec

        try:
            fsspec.filesystem("s3", skip_instance_cache=True).mkdir(BUCKET)
        except FileExistsError:  # moto's backends live in the process: a server started before made it
            pass
        yield f"http://127.0.0.1:{port}"
    finally:
        patch.undo()
        server.stop()


def make_store_test_pack(tmp_path, wesep_list, real_audio):
    """Three real mixtures (one stereo) and a broken line skipped, in shards of 150 kB: the pack the object-storage
    tests publish."""
    librivox = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("m1", tuple(librivox[:2])), Mix("m2", tuple(librivox[1:3]), layout="stereo"),
                       Mix("m3", (librivox[0], librivox[2])), '{"key": "broken"'])
    out = tmp_path / "src"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=150_000, skip_bad=True, progress=False))
    return out
