"""A TCP proxy on loopback that makes a local S3-protocol server behave like a store across a network: every
connection and every request pays a latency, and everything the store sends shares one bandwidth cap.

Why a proxy rather than a slow server: the readers under test (speechpack through fsspec/s3fs, MosaicML Streaming
through boto3, LitData through boto3 or obstore) all take an endpoint URL, so pointing them at the proxy puts the
same path between each of them and the same server, and the proxy counts the bytes each of them fetched.

The model (a round trip of ``latency`` seconds, a link of ``bandwidth`` bytes/s from the store to the node):

- bytes from the client reach the server ``latency`` after they arrive, in order and pipelined (a request waits one
  latency however long it is, as one send over a long link does);
- a new connection waits ``connect_latency`` first (the TCP handshake).  It defaults to 0 because moto's server
  closes the connection after every response (``Connection: close``), so every request is a new connection here,
  while a real store keeps them open: charging the handshake would make every request pay two round trips;
- bytes from the server go out through a token bucket shared by every connection, so parallel connections split
  the cap instead of multiplying it.  A sender sleeps only once it is more than ``BURST_S`` ahead of the link (the
  event loop's timers are as coarse as a millisecond, and a sleep per 64 kB chunk would cap the rate below 65 MB/s);
- every byte sent to a client is added to a counter in a small memory-mapped file (:class:`ByteCounter`), which
  the measured processes read at their epoch boundaries without talking to the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import mmap
import os
import struct
import sys
import threading
import time

#: Bytes read per call from either side: large enough that a 200 MB/s cap costs a few thousand wake-ups a second.
CHUNK = 1 << 18
#: How far a sender may run ahead of the shared link before it sleeps (seconds).
BURST_S = 0.004


class ByteCounter:
    """Two unsigned 64-bit counters in a file, mapped shared: bytes sent (slot 0) and connections, which are
    requests here (slot 1: moto closes every connection after its reply); the proxy adds, any process reads."""

    def __init__(self, path: str, create: bool = False):
        if create:
            with open(path, "wb") as fp:
                fp.write(bytes(16))
        self._fd = os.open(path, os.O_RDWR if create else os.O_RDONLY)
        self._map = mmap.mmap(self._fd, 16, access=mmap.ACCESS_WRITE if create else mmap.ACCESS_READ)
        self.path = path

    def add(self, count: int, slot: int = 0) -> None:
        struct.pack_into("<Q", self._map, 8 * slot, self.value(slot) + count)  # one writer: the proxy's event loop

    def value(self, slot: int = 0) -> int:
        return struct.unpack_from("<Q", self._map, 8 * slot)[0]

    def requests(self) -> int:
        """Connections opened through the proxy so far (one per request against moto)."""
        return self.value(1)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


class ThrottledProxy:
    """``start()`` listens on a free loopback port in a thread of its own and returns it; ``stop()`` closes it."""

    def __init__(self, upstream_port: int, latency_s: float, bandwidth_bps: float, counter: ByteCounter,
                 connect_latency_s: float = 0.0):
        if latency_s < 0 or bandwidth_bps <= 0:
            raise ValueError(f"latency must be >= 0 and bandwidth > 0, got {latency_s} s and {bandwidth_bps} B/s")
        self.upstream_port = upstream_port
        self.latency = latency_s
        self.connect_latency = connect_latency_s
        self.bandwidth = bandwidth_bps
        self.counter = counter
        self.connections = 0
        self._pumps: set[asyncio.Future] = set()
        self._link_free_at = 0.0  # the token bucket: when the shared link has sent everything reserved so far
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> int:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", 0, limit=CHUNK))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="throttled-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        return self.port

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.counter.add(1, slot=1)
        try:
            await asyncio.sleep(self.connect_latency)
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream_port, limit=CHUNK)
        except OSError:
            client_w.close()
            return
        pumps = {asyncio.ensure_future(self._to_server(client_r, server_w)),
                 asyncio.ensure_future(self._to_client(server_r, client_w))}
        self._pumps |= pumps  # the loop holds tasks weakly: keep them until the connection ends
        try:
            # HTTP never half-closes a connection it still uses: once either side is done, so is the connection.
            _done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._pumps -= pumps
            for writer in (client_w, server_w):
                writer.close()

    async def _to_server(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Client to server: each read delivered ``latency`` after it arrived, in order (a delay line)."""
        queue: asyncio.Queue = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    _half_close(sink)
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                sink.write(data)
                await sink.drain()

        delivering = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await source.read(CHUNK)
                queue.put_nowait((time.monotonic() + self.latency, data))
                if not data:
                    break
            await delivering
        finally:
            delivering.cancel()

    async def _to_client(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Server to client: every chunk reserves its time on the shared link, then goes out and is counted."""
        try:
            while data := await source.read(CHUNK):
                now = time.monotonic()
                start = max(now, self._link_free_at)
                self._link_free_at = start + len(data) / self.bandwidth
                if self._link_free_at - now > BURST_S:
                    await asyncio.sleep(self._link_free_at - now)
                sink.write(data)
                self.counter.add(len(data))
                await sink.drain()
        finally:
            _half_close(sink)


def _half_close(writer: asyncio.StreamWriter) -> None:
    """Pass an end of stream on (HTTP clients close their side once done); the other side may be gone already."""
    with contextlib.suppress(OSError, RuntimeError):
        if writer.can_write_eof():
            writer.write_eof()


def main() -> None:
    """Run the proxy in a process of its own (so it shares no interpreter lock with the server): prints ``PORT n``
    and serves until its standard input closes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--connect-ms", type=float, default=0.0)
    parser.add_argument("--bandwidth-mbs", type=float, default=200.0)
    parser.add_argument("--counter", required=True, help="file of the byte counter (created)")
    args = parser.parse_args()
    proxy = ThrottledProxy(args.upstream_port, args.latency_ms / 1000, args.bandwidth_mbs * 1e6,
                           ByteCounter(args.counter, create=True), args.connect_ms / 1000)
    print(f"PORT {proxy.start()}", flush=True)
    sys.stdin.read()
    proxy.stop()


__all__ = ["ByteCounter", "ThrottledProxy"]


if __name__ == "__main__":
    main()
