"""A TCP forwarder on 127.0.0.1 that can stall or refuse, to put faults between a client and
the apiserver.

TLS passes through untouched: the client still verifies the apiserver's certificate (SAN
127.0.0.1), so a kubeconfig whose ``server`` is the proxy's URL works as is.

Modes:
    pass    forward bytes both ways
    stall   keep every connection (and accept new ones) but forward nothing: a hung apiserver
    refuse  close the listening socket and reset every open connection: an unreachable apiserver

``delay`` (seconds, any mode but stall) holds every chunk bound for the apiserver that long
before forwarding it: a slow link that makes each request of a client take at least ``delay``,
so a test can act between two of its requests (answers and watch events are not delayed).

While refusing, the port stays bound by a socket that does not listen (``SO_REUSEPORT``), so
connects are refused and no other socket, such as a client's ephemeral port, can take the port
before ``pass`` listens on it again.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from typing import Literal, Self

Mode = Literal["pass", "stall", "refuse"]

_POLL = 0.05


class FaultProxy:
    def __init__(self, upstream_port: int, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self.upstream_port = upstream_port
        self.mode: Mode = "pass"
        self.delay = 0.0
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        #: Bound, not listening: holds the port while refusing.
        self._hold: socket.socket | None = None
        self._closed = False
        self.port = 0
        self.accepted = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        self._listen()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._stop_listening()
        self._release_hold()
        self._reset_all()

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def set_mode(self, mode: Mode) -> None:
        with self._lock:
            previous, self.mode = self.mode, mode
        if mode == "refuse" and previous != "refuse":
            self._hold = self._bound()
            self._stop_listening()
            self._reset_all()
        elif mode != "refuse" and previous == "refuse":
            self._listen()

    # -- internals ---------------------------------------------------------------------------

    def _bound(self) -> socket.socket:
        """A socket bound to the proxy's port (a fresh one while ``port`` is 0)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((self.host, self.port))
        return sock

    def _listen(self) -> None:
        listener = self._bound()
        listener.listen(128)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        self._release_hold()
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _release_hold(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.close()

    def _stop_listening(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.close()

    def _reset_all(self) -> None:
        with self._lock:
            connections = list(self._connections)
            self._connections.clear()
        for conn in connections:
            with contextlib.suppress(OSError):  # linger 0: close sends RST, not FIN
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                readable, _, _ = select.select([listener], [], [], _POLL)
                if not readable:
                    if listener.fileno() < 0:
                        return
                    continue
                client, _ = listener.accept()
            except (OSError, ValueError):  # closed by refuse/close
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection((self.host, self.upstream_port), timeout=5)
        except OSError:
            with contextlib.suppress(OSError):
                client.close()
            return
        with self._lock:
            if self._closed or self.mode == "refuse":
                self._connections.update((client, upstream))
                closing = True
            else:
                self._connections.update((client, upstream))
                closing = False
        if closing:
            self._reset_all()
            return
        done = threading.Event()
        for src, dst, up in ((client, upstream, True), (upstream, client, False)):
            threading.Thread(target=self._pump, args=(src, dst, done, up), daemon=True).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, done: threading.Event, upstream: bool
    ) -> None:
        try:
            while not done.is_set():
                if self.mode == "stall":  # hold the connection, move no bytes
                    time.sleep(_POLL)
                    continue
                readable, _, _ = select.select([src], [], [], _POLL)
                if not readable:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                # Another thread may stall it meanwhile (mypy narrowed `mode` above).
                while self.mode == "stall" and not done.is_set():  # type: ignore[comparison-overlap]
                    time.sleep(_POLL)
                if upstream and self.delay:
                    time.sleep(self.delay)
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            done.set()
            with self._lock:
                self._connections.discard(src)
                self._connections.discard(dst)
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()
