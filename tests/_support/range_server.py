"""A small HTTP server of a local folder for tests of remote reads: byte ranges, ETags,
folder listings that fsspec's HTTP file system can list and glob, counters of what it
served, and switches that make it a bad server (one that ignores ``Range``, fails with
503, or answers slowly).

    with RangeServer(folder) as server:
        Documents(server.url + "/store")
        assert server.bytes_served < ...

The server runs on its own daemon threads (a thread a connection), in the test's process;
readers may be in that process or in others (it is a socket on 127.0.0.1). Standard
library only, and quiet: nothing is logged.
"""

from __future__ import annotations

import collections
import contextlib
import email.utils
import html
import http.server
import os
import re
import shutil
import socket
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, cast

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_CHUNK = 64 << 10  # body bytes written (and counted) at a time


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a connection left open never holds the process
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128  # many readers connect at once (the default 5 drops some)
    owner: RangeServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a reader that hangs up is no error; anything else is kept in `errors`."""
        error = sys.exc_info()[1]
        if error is not None and not isinstance(error, ConnectionError):
            self.owner._error(error)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers and buckets do

    @property
    def owner(self) -> RangeServer:
        return cast(_Server, self.server).owner

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def setup(self) -> None:
        super().setup()
        self.owner._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.owner._closed(self.connection)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        owner = self.owner
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        owner._count_request(self.command, path, self.headers.get("Range"))
        if owner.delay_s:
            time.sleep(owner.delay_s)
        if self.command in owner.fail_methods and owner._take_failure():
            self._send_status(503, "failing on purpose (fail_first)")
            return
        target = owner._local(path)
        if target is None or not target.exists():
            self._send_status(404, f"{path} not found")
            return
        if target.is_dir():
            self._send_listing(path, target, body)
            return
        self._send_file(path, target, body)

    def _send_status(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self._write(self.path, data)

    def _send_listing(self, path: str, folder: Path, body: bool) -> None:
        """A folder as HTML links, relative to the folder (``NAME``, ``NAME/`` for a folder):
        what `fsspec.implementations.http.HTTPFileSystem.ls` parses."""
        links = []
        for name in sorted(os.listdir(folder)):
            href = urllib.parse.quote(name + ("/" if (folder / name).is_dir() else ""))
            links.append(f'<a href="{html.escape(href)}">{html.escape(name)}</a>')
        data = ("<html><body>\n" + "<br>\n".join(links) + "\n</body></html>\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self._write(path, data)

    def _send_file(self, path: str, file: Path, body: bool) -> None:
        owner = self.owner
        try:
            handle = open(file, "rb")  # noqa: SIM115 (closed below)
        except OSError:
            self._send_status(404, f"{path} cannot be read")
            return
        with handle:
            stat = os.fstat(handle.fileno())
            size = stat.st_size
            asked = self.headers.get("Range")
            span = None if asked is None or owner.ignore_ranges else _span(asked, size)
            if span == "unsatisfiable":
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            begin, end = span if isinstance(span, tuple) else (0, size)
            self.send_response(206 if isinstance(span, tuple) else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - begin))
            if isinstance(span, tuple):
                self.send_header("Content-Range", f"bytes {begin}-{end - 1}/{size}")
            if not owner.ignore_ranges:  # a server that ignores ranges just does not say
                self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{size:x}-{stat.st_mtime_ns:x}"')
            self.send_header("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True))
            self.end_headers()
            if body:
                handle.seek(begin)
                self._copy(path, handle, end - begin)

    def _copy(self, path: str, source: BinaryIO, count: int) -> None:
        while count > 0:
            data = source.read(min(_CHUNK, count))
            if not data:
                break
            if not self._write(path, data):
                return
            count -= len(data)

    def _write(self, path: str, data: bytes) -> bool:
        """Sends `data`; False (and the connection closed) where the reader hung up.

        Counted before it is sent, so that a reader that has its answer finds it counted;
        taken back where the reader hung up before it was all sent.
        """
        self.owner._count_bytes(path, len(data))
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.owner._count_bytes(path, -len(data))
            self.close_connection = True
            return False
        return True


def _span(asked: str, size: int) -> tuple[int, int] | str | None:
    """The bytes ``[begin, end)`` a ``Range`` header asks of a file of `size` bytes; None
    for a header this server does not read (answered with the whole file, as HTTP allows),
    ``"unsatisfiable"`` for a range past the end."""
    found = _RANGE.match(asked.strip())
    if found is None or found.group(1) == found.group(2) == "":
        return None
    first, last = found.groups()
    if first == "":  # bytes=-N: the last N bytes
        begin, end = max(size - int(last), 0), size
    else:
        begin = int(first)
        end = size if last == "" else min(int(last) + 1, size)
    if begin >= size or begin >= end:
        return "unsatisfiable"
    return begin, end


class RangeServer:
    """An HTTP server of `folder` on 127.0.0.1 (a free port), on daemon threads.

    Args:
        folder: what it serves; ``/a/b.parquet`` is ``folder/a/b.parquet``, a folder's
            path answers a page of ``<a href>`` links to what it holds.
        ignore_ranges: answer every GET with the whole file (200), whatever ``Range`` says.
        fail_first: answer the first `fail_first` GETs with 503 (see `fail_next`).
        fail_methods: the requests `fail_first` fails: ``("GET", "HEAD")`` fails both.
        delay_s: wait this long before answering each request.

    Attributes:
        url: ``http://127.0.0.1:PORT``, once started.
        bytes_served: body bytes sent, every request together (a thread-safe count).
        requests: requests answered (HEAD and GET).
        bytes_by_path: body bytes sent, by the path asked for.
        log: (method, path, Range header or None) of every request, in order.
        errors: what the handler raised, other than a reader hanging up (none, normally).
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        ignore_ranges: bool = False,
        fail_first: int = 0,
        delay_s: float = 0.0,
        fail_methods: tuple[str, ...] = ("GET",),
    ):
        self.folder = Path(folder).resolve()
        self.ignore_ranges, self.delay_s = ignore_ranges, delay_s
        self.fail_methods = fail_methods
        self._lock = threading.Lock()
        self._failures_left = fail_first
        self._connections: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self.reset()

    # Starting and stopping.

    def start(self) -> RangeServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="range-server",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving and closes every connection (a reader's next request fails)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> RangeServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # What tests ask.

    def url_of(self, relative: str | os.PathLike[str]) -> str:
        """The URL of `relative` (a path under `folder`, or an absolute path inside it)."""
        path = Path(relative)
        if path.is_absolute():
            path = path.resolve().relative_to(self.folder)
        return f"{self.url}/{urllib.parse.quote(path.as_posix())}"

    def reset(self) -> None:
        """Sets the counters and the log to nothing served."""
        with self._lock:
            self.bytes_served = 0
            self.requests = 0
            self.bytes_by_path: collections.Counter[str] = collections.Counter()
            self.log: list[tuple[str, str, str | None]] = []
            self.errors: list[BaseException] = []

    def fail_next(self, count: int) -> None:
        """Answers the next `count` requests of `fail_methods` (GETs) with 503 (service
        unavailable)."""
        with self._lock:
            self._failures_left = count

    @property
    def failures_left(self) -> int:
        with self._lock:
            return self._failures_left

    def copy_in(self, source: str | os.PathLike[str], relative: str) -> str:
        """Copies the file or folder `source` to `relative` under `folder`; its URL."""
        target = self.folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(source).is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)
        return self.url_of(relative)

    # Called by the handler's threads.

    def _local(self, path: str) -> Path | None:
        """The file or folder of the URL path `path`; None where it lies outside `folder`."""
        target = (self.folder / path.lstrip("/")).resolve()
        if target != self.folder and self.folder not in target.parents:
            return None
        return target

    def _count_request(self, method: str, path: str, asked: str | None) -> None:
        with self._lock:
            self.requests += 1
            self.log.append((method, path, asked))

    def _count_bytes(self, path: str, count: int) -> None:
        with self._lock:
            self.bytes_served += count
            self.bytes_by_path[path] += count

    def _take_failure(self) -> bool:
        with self._lock:
            if self._failures_left <= 0:
                return False
            self._failures_left -= 1
            return True

    def _error(self, error: BaseException) -> None:
        with self._lock:
            self.errors.append(error)

    def _opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)

    def _closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)
