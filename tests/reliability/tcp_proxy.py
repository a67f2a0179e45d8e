"""A TCP proxy a test can sever: a network partition between one client and its server.

`TcpProxy(target)` listens on a free port of 127.0.0.1 and forwards every connection to
`target`. `cut()` drops every connection and refuses new ones (accepted, then closed at once,
as a firewall that resets them would), until `restore()`. Threads, not asyncio: the test's own
thread only calls `cut()` and `restore()`.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Drop every connection through the proxy, and every new one until `restore()`."""
        with self._lock:
            self._cut = True
            sockets, self._open = self._open, set()
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)
        self._acceptor.join(5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut
            if refused:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                if self._cut:  # cut while connecting
                    _close(client)
                    _close(server)
                    continue
                self._open |= {client, server}
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open -= {source, sink}
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
