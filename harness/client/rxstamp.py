"""Kernel receive timestamps for harness.client.http1: a plain-TCP connection read with `recvmsg_into`.

Linux stamps every received segment when the network stack takes it in; with SO_TIMESTAMPNS set on a
socket, `recvmsg` hands back, as ancillary data, the CLOCK_REALTIME time of the last segment that read
consumed (tcp_recvmsg -> tcp_recv_timestamp). That time does not depend on when the event loop gets
round to the socket: when 64 streams' chunks arrive together, the last one read is no longer stamped
late by the reads before it, a GC pause or a neighbour's process. Each read's stamp is mapped onto
`time.perf_counter()`'s clock with the offset between the two clocks (CLOCK_REALTIME - CLOCK_MONOTONIC:
NTP slews both alike, so it moves only when the realtime clock is stepped). The offset is measured
every RECHECK_S, and at once when a stamp maps later than the read (a step forward), from a
perf_counter / time_ns / perf_counter triple whose two perf_counter reads are close (nothing
preempted us in between). The result is clamped to be no later than the read and never earlier than
the connection's previous read or its last request write.

asyncio's transports cannot return ancillary data, so `StampedConn` owns a non-blocking socket: a
`loop.add_reader` callback receives into the transport's one reused buffer, writes go out with
`send` (and `add_writer` for what the kernel did not take). `Inbox` is what both connection kinds
share (the asyncio-protocol `_Conn` in harness.client.http1 is the fallback for https and where the option
is missing): reads queue up for the one reader, or go straight to a sink (`_Body.pump`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import sys
import time
from collections.abc import Callable
from time import perf_counter, time_ns

PAUSE_AT = 4 * 1024 * 1024  # stop reading the socket while this much is waiting for the consumer
# SO_TIMESTAMPNS(_OLD) in asm-generic (x86, arm, riscv, powerpc...); Python 3.11 does not export it.
# Elsewhere the probe below finds no such stamp and the fallback is used.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")  # struct timespec (the _OLD option's layout: native longs)
_unpack = _TIMESPEC.unpack
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size)

CLOCK_PAIR_S = 10e-6  # an offset reading is trusted when its two perf_counter reads are this close
RECHECK_S = 0.1  # how often the offset is measured again (a read costs ~0.2 µs less than each time)

# Kernel stamps usable here: None until probed (on the first plain-http connection). Tests set False.
KERNEL_STAMPS: bool | None = None
_keeper: socket.socket | None = None  # see _probe


def clock_offset_ns(tries: int = 16) -> int:
    """CLOCK_REALTIME minus the perf_counter clock, in ns, from the tightest of up to `tries` readings."""
    best = None
    for _ in range(tries):
        a = perf_counter()
        w = time_ns()
        b = perf_counter()
        if best is None or b - a < best[0]:
            best = (b - a, w - int((a + b) * 5e8))
            if b - a < CLOCK_PAIR_S / 4:
                break
    assert best is not None
    return best[1]


_offset_ns = clock_offset_ns()
_recheck_at = perf_counter() + RECHECK_S


def _remeasure(kernel_ns: int) -> float:
    """Measure the clock offset again; `kernel_ns` on the perf_counter clock, no later than now."""
    global _offset_ns, _recheck_at
    _offset_ns = clock_offset_ns()
    now = perf_counter()
    _recheck_at = now + RECHECK_S
    return min((kernel_ns - _offset_ns) * 1e-9, now)


def kernel_stamps() -> bool:
    """Whether this kernel returns SO_TIMESTAMPNS receive stamps on TCP (probed once, over loopback)."""
    global KERNEL_STAMPS
    if KERNEL_STAMPS is None:
        KERNEL_STAMPS = _probe()
    return KERNEL_STAMPS


def _probe() -> bool:
    """Stamps arrive on a loopback TCP read. The kernel switches stamping on for the whole stack only
    while some socket asks for it, and switching it on is deferred to a worker: the probe's first reads
    may come unstamped, and so would the first reads of every connection opened when no other was
    open. A UDP socket asking for stamps is kept for the life of the process to hold the switch on."""
    global _keeper
    if not sys.platform.startswith("linux"):
        return False
    keeper = None
    try:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        with socket.create_server(("127.0.0.1", 0)) as lsn:
            with socket.create_connection(lsn.getsockname(), timeout=2) as c:
                peer, _ = lsn.accept()
                with peer:
                    c.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                    for _ in range(100):  # up to ~0.2 s for the switch
                        before = time_ns()
                        peer.sendall(b"x")
                        _, anc, _, _ = c.recvmsg(16, _ANC_SIZE)
                        stamp = _kernel_ns(anc)
                        if stamp is not None:
                            break
                        time.sleep(0.002)
        if stamp is None or abs(stamp - before) > 10 * 10**9:
            keeper.close()
            return False
    except OSError:
        if keeper is not None:
            keeper.close()
        return False
    _keeper = keeper
    return True


def _kernel_ns(anc: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return sec * 1_000_000_000 + nsec
    return None


def enable(sock: socket.socket) -> bool:
    """Ask for receive stamps on `sock`; False when the kernel refuses."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


class Inbox:
    """What one connection received: reads queue up until the one reader takes them all at once, or
    go straight to `sink(data, t)` (set by `_Body.pump`), `t` being the read's time on the
    perf_counter clock. `closed` once the peer is gone (EOF, reset) or we closed it."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.pending: list[bytes] = []
        self.size = 0
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.error: BaseException | None = None
        self.paused = False
        self.idle_since = 0.0
        self.last_t = 0.0  # time of the latest read (of the latest request write, when later)
        self.sink: Callable[[bytes, float], None] | None = None

    # --- what a connection kind provides
    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def pause_reading(self) -> None:
        raise NotImplementedError

    def resume_reading(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # --- shared
    def deliver(self, data: bytes, t: float) -> None:
        self.last_t = t
        if self.sink is not None:
            self.sink(data, t)
            return
        self.pending.append(data)
        self.size += len(data)
        if self.size > PAUSE_AT and not self.paused:
            self.paused = True
            self.pause_reading()
        self._wake()

    def _wake(self) -> None:
        if self.sink is not None and self.closed:
            self.sink(b"", self.last_t)
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def take(self) -> bytes:
        """Whatever is queued, without waiting."""
        data = b"".join(self.pending)
        self.pending.clear()
        self.size = 0
        return data

    async def read(self) -> bytes:
        """Everything received since the last call (waits for something); b"" once the peer is gone."""
        while not self.pending:
            if self.closed:
                return b""
            self.waiter = self.loop.create_future()
            await self.waiter
        pending = self.pending
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        self.size = 0
        if self.paused:
            self.paused = False
            self.resume_reading()
        return data


class StampedConn(Inbox):
    """A plain TCP connection read with `recvmsg_into` into the shared buffer; each read is timed by
    the kernel's receive stamp (perf_counter at the read when a read carries none)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, buffer: memoryview):
        super().__init__(loop)
        self.sock: socket.socket | None = sock
        self.fd = sock.fileno()
        self.bufs = [buffer]
        self.buffer = buffer
        self.out = bytearray()  # what send() did not take yet
        loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        sock = self.sock
        if sock is None:
            return
        try:
            n, anc, _, _ = sock.recvmsg_into(self.bufs, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        if not n:
            self._lost(None)  # EOF: as asyncio's transport does when eof_received() returns False
            return
        now = perf_counter()
        # The only ancillary data asked for is the stamp (SCM_TIMESTAMPNS == SO_TIMESTAMPNS).
        if anc and anc[0][1] == SO_TIMESTAMPNS:
            sec, nsec = _unpack(anc[0][2])
            t = (sec * 1_000_000_000 + nsec - _offset_ns) * 1e-9
            if t > now or now > _recheck_at:
                t = _remeasure(sec * 1_000_000_000 + nsec)
        else:
            t = now
        if t < self.last_t:
            t = self.last_t
        data = bytes(self.buffer[:n])
        sink = self.sink
        if sink is not None:  # deliver(), one call less: this is the per-read path
            self.last_t = t
            sink(data, t)
        else:
            self.deliver(data, t)

    def write(self, data: bytes) -> None:
        sock = self.sock
        if sock is None:
            return  # as asyncio's transports: writing to a closed connection is dropped
        self.last_t = max(self.last_t, perf_counter())  # a response read is never earlier than this
        if self.out:
            self.out += data
            return
        try:
            sent = sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lost(exc)
            return
        if sent < len(data):
            self.out += data[sent:]
            self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        sock = self.sock
        if sock is None:
            return
        try:
            sent = sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        del self.out[:sent]
        if not self.out:
            self.loop.remove_writer(self.fd)

    def pause_reading(self) -> None:
        if self.sock is not None:
            self.loop.remove_reader(self.fd)

    def resume_reading(self) -> None:
        if self.sock is not None:
            self.loop.add_reader(self.fd, self._readable)

    def _shut(self) -> None:
        sock, self.sock = self.sock, None
        if sock is None:
            return
        if not self.loop.is_closed():
            self.loop.remove_reader(self.fd)
            self.loop.remove_writer(self.fd)
        self.out.clear()
        sock.close()

    def _lost(self, exc: BaseException | None) -> None:
        """The peer is gone (EOF when `exc` is None, else reset or a failed write): as asyncio's
        eof_received / connection_lost."""
        if exc is not None:
            self.error = exc
        self.closed = True
        self._shut()
        self._wake()

    def close(self) -> None:
        self.closed = True
        if self.sock is not None:
            self._shut()
            self._wake()


async def open_stamped(loop: asyncio.AbstractEventLoop, host: str, port: int,
                       buffer: memoryview) -> StampedConn:
    """Connect to host:port (each resolved address in turn, as asyncio's create_connection does)."""
    try:
        ipaddress.ip_address(host)
        infos = [(socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port))]
    except ValueError:
        resolved = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        infos = [(family, addr) for family, _, _, _, addr in resolved]
    errors: list[OSError] = []
    for family, addr in infos:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            enable(sock)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            errors.append(exc)
            continue
        except BaseException:
            sock.close()
            raise
        return StampedConn(loop, sock, buffer)
    if not errors:
        raise OSError(f"getaddrinfo returned no address for {host}")
    if len(errors) == 1 or all(str(e) == str(errors[0]) for e in errors):
        raise errors[0]
    raise OSError("multiple exceptions: " + "; ".join(str(e) for e in errors))

