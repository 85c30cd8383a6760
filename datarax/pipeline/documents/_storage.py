"""Where documents files lie: a local path, or a URL of any fsspec file system.

A path with a scheme (``gs://``, ``s3://``, ``hf://``, ``http(s)://``, ``memory://``; not
``file://``, which is a local path) is read through fsspec (the ``remote`` extra) and the
package of its scheme: gcsfs for ``gs://``, s3fs for ``s3://``, huggingface_hub for
``hf://``, aiohttp for ``http(s)://``. Credentials and options come from where those
packages look for them (their environment variables, fsspec's configuration).

Documents are read by byte range, never by downloading a file: `read_ranges` fetches the
ranges asked for, each once. A remote fetch that fails for a passing cause (a timeout, a
dropped connection; an HTTP server silent for `TIMEOUT_S`) is tried `ATTEMPTS` times in
all, then raised as a `RemoteReadError` naming the URL; a server that answers a range
request with more bytes than asked (it ignores ``Range``) is refused at once. Each
process makes its own file system objects (and so its own connections): the objects that
describe files hold only URLs.
"""

from __future__ import annotations

import concurrent.futures
import glob as local_glob
import io
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, cast

from datarax._extras import require
from datarax.errors import RemoteReadError

ATTEMPTS = 3  # tries of one remote fetch, the first included
TIMEOUT_S = 60.0  # an HTTP server's longest silence, connecting or answering, in a try
_BACKOFF_S = 0.2  # the wait before the second try; doubled before each later one
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]+)://")
# The package that implements each common scheme, for the advice of a missing one.
PACKAGES = {
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "s3": "s3fs",
    "s3a": "s3fs",
    "hf": "huggingface_hub",
    "http": "aiohttp",
    "https": "aiohttp",
    "az": "adlfs",
    "abfs": "adlfs",
}

Stamp = tuple[int, int | str]  # (size in bytes, st_mtime_ns or the store's version string)


def local(path: str) -> str:
    """`path` without a ``file://`` scheme (other paths unchanged).

    Example:
        >>> local("file:///data/a.jsonl"), local("gs://b/a.jsonl")
        ('/data/a.jsonl', 'gs://b/a.jsonl')
    """
    return path[len("file://") :] if path.lower().startswith("file://") else path


def is_url(path: str) -> bool:
    """Whether `path` is read through fsspec: it has a scheme other than ``file``.

    Example:
        >>> is_url("memory://corpus/a.parquet"), is_url("/data/a.parquet")
        (True, False)
    """
    found = _SCHEME.match(path)
    return found is not None and found.group(1).lower() != "file"


def join(folder: str, name: str) -> str:
    """`name` inside `folder`, a local path or a URL (whose separator is always ``/``)."""
    return f"{folder.rstrip('/')}/{name}" if is_url(folder) else os.path.join(folder, name)


_filesystems: dict[tuple[int, str], Any] = {}


def filesystem(url: str) -> Any:
    """The fsspec file system of `url`'s scheme, made once in each process.

    Raises:
        ImportError: fsspec, or the package of the scheme, is not installed (named).
        ValueError: fsspec knows no such scheme.
    """
    require("fsspec", "remote", f"Reading {url}")
    import fsspec

    scheme = _SCHEME.match(url).group(1).lower()  # type: ignore[union-attr]
    key = (os.getpid(), scheme)
    if key not in _filesystems:
        try:
            kind = fsspec.get_filesystem_class(scheme)
        except ImportError as error:
            package = PACKAGES.get(scheme, "the fsspec implementation of " + scheme)
            raise ImportError(
                f"Reading {url} needs {package}, which is not installed: pip install "
                f"{package} (fsspec said: {error})."
            ) from None
        except ValueError:
            raise ValueError(
                f"{url} has the scheme {scheme}://, which fsspec does not know; use a path or "
                "a URL of gs://, s3://, hf://, http(s)://, memory:// or another fsspec scheme."
            ) from None
        options: dict[str, Any] = {}
        if scheme in ("http", "https"):  # aiohttp's own bound is 5 minutes a request
            import aiohttp

            wait = aiohttp.ClientTimeout(sock_connect=TIMEOUT_S, sock_read=TIMEOUT_S)
            options["client_kwargs"] = {"timeout": wait}
        _filesystems[key] = kind(skip_instance_cache=True, **options)
    return _filesystems[key]


def _info(url: str) -> dict[str, Any] | None:
    """What the store says of `url` (a HEAD request over HTTP, not a download); None
    where there is nothing there."""
    try:
        return _remote(url, lambda fs: fs.info(url))
    except FileNotFoundError:
        return None


def exists(path: str) -> bool:
    """Whether `path` (a file or folder; a URL's folder: any object under it) exists."""
    if not is_url(path):
        return os.path.exists(path)
    return _info(path) is not None


def isfile(path: str) -> bool:
    """Whether `path` is a file (an object, for a URL)."""
    if not is_url(path):
        return os.path.isfile(path)
    info = _info(path)
    return info is not None and info.get("type") != "directory"


def isdir(path: str) -> bool:
    """Whether `path` is a folder (a URL: a prefix that holds objects)."""
    if not is_url(path):
        return os.path.isdir(path)
    return bool(_remote(path, lambda fs: fs.isdir(path)))


def listdir(path: str) -> list[str]:
    """The names in the folder `path`."""
    if not is_url(path):
        return os.listdir(path)
    found = _remote(path, lambda fs: fs.ls(path, detail=False))
    return [str(item).rstrip("/").rsplit("/", 1)[-1] for item in found]


def has_magic(pattern: str) -> bool:
    """Whether `pattern` holds a glob's special characters (``*``, ``?``, ``[``)."""
    return local_glob.has_magic(pattern)


def glob(pattern: str) -> list[str]:
    """The paths `pattern` matches, sorted (``**`` matches folders at any depth); URLs
    keep their scheme."""
    if not is_url(pattern):
        return sorted(local_glob.glob(pattern, recursive=True))
    fs = filesystem(pattern)
    found = _remote(pattern, lambda fs: fs.glob(pattern))
    return sorted(item if is_url(str(item)) else fs.unstrip_protocol(str(item)) for item in found)


def absolute(path: str) -> str:
    """`path` made absolute (a URL unchanged)."""
    return path if is_url(path) else os.path.abspath(os.path.expanduser(local(path)))


_VERSIONS = ("generation", "etag", "content-md5", "last-modified", "lastmodified", "updated")


def stamp_of(path: str) -> Stamp:
    """`path`'s size and version: ``st_mtime_ns`` locally; for a URL the first the store
    gives of its generation, ETag, MD5, modification time (else its creation time, else
    nothing: the size alone). OSError where it is gone."""
    if not is_url(path):
        stat = os.stat(path)
        return stat.st_size, stat.st_mtime_ns
    info = _remote(path, lambda fs: fs.info(path))
    fields = {str(name).lower(): value for name, value in info.items()}
    if fields.get("type") == "directory":
        raise IsADirectoryError(f"{path} is a folder, not a file.")
    version = next((fields[name] for name in _VERSIONS if fields.get(name)), None)
    version = version if version is not None else fields.get("created", fields.get("mtime", ""))
    return int(fields.get("size") or 0), str(version)


def open_binary(path: str) -> BinaryIO:
    """`path` opened for reading in order, a remote file in blocks of 8 MiB."""
    if not is_url(path):
        return open(local(path), "rb")
    return _remote(path, lambda fs: fs.open(path, "rb", block_size=8 << 20))


def open_ranges(path: str, size: int) -> BinaryIO:
    """`path` (of `size` bytes) opened for reads at any position, each read of a URL one
    ranged request for just its bytes (a Parquet file's footer, then the column chunks
    asked for), retried and checked as `read_ranges` does."""
    if not is_url(path):
        return open(local(path), "rb")
    return cast(BinaryIO, _Ranges(path, size))


class _Ranges(io.RawIOBase):
    """A remote file read by ranged requests at any position."""

    def __init__(self, url: str, size: int):
        self.url, self.size, self.at = url, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.at, io.SEEK_END: self.size}[whence]
        self.at = max(0, base + offset)
        return self.at

    def readinto(self, buffer: Any) -> int:
        count = max(0, min(len(buffer), self.size - self.at))
        data = _fetch(filesystem(self.url), self.url, self.at, count)
        buffer[: len(data)] = data
        self.at += len(data)
        return len(data)


def read_ranges(path: str, begins: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
    """The bytes ``[begin, begin + size)`` of `path` for each pair, in order, each range
    fetched once (in this thread: callers spread reads over threads).

    Raises:
        RemoteReadError: a fetch failed `ATTEMPTS` times, or the server ignores ranges.
        OSError: a local file cannot be read.
    """
    if not is_url(path):
        descriptor = os.open(local(path), os.O_RDONLY)
        try:
            return [os.pread(descriptor, s, b) for b, s in zip(begins, sizes, strict=True)]
        finally:
            os.close(descriptor)
    fs = filesystem(path)
    return [_fetch(fs, path, int(b), int(s)) for b, s in zip(begins, sizes, strict=True)]


def _fetch(fs: Any, url: str, begin: int, size: int) -> bytes:
    if size == 0:
        return b""
    data: bytes = _remote(url, lambda fs: fs.cat_file(url, start=begin, end=begin + size), fs)
    if len(data) > size:
        raise RemoteReadError(
            f"The server of {url} answered a request for bytes {begin}-{begin + size - 1} with "
            f"{len(data)} bytes: it does not serve byte ranges (HTTP Range), and reading each "
            "document would download the whole file. Serve the files from a server or bucket "
            "that answers range requests, or copy them to a local disk.",
            url=url,
            attempts=1,
        )
    return data


_TRANSIENT = ("aiohttp", "botocore", "google", "requests", "urllib3", "huggingface_hub")


def _transient(error: BaseException) -> bool:
    """Whether `error` may pass if the request is made again (a timeout, a dropped or
    refused connection, a server's 5xx), not a missing file or a refusal. A "not found"
    caused by a passing failure (fsspec's HTTP ``info`` raises one for a 503) is passing."""
    if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError)):
        cause = error.__cause__ or error.__context__
        return cause is not None and cause is not error and _transient(cause)
    if isinstance(error, (TimeoutError, ConnectionError)):
        return True
    status = getattr(error, "status", None) or getattr(error, "code", None)
    if isinstance(status, int):
        return status >= 500 or status == 429
    module = type(error).__module__.split(".")[0]
    return isinstance(error, OSError) or module in _TRANSIENT


def _remote(url: str, call: Callable[[Any], Any], fs: Any = None) -> Any:
    """`call(fs)`, tried up to `ATTEMPTS` times while it fails for a passing cause.

    Raises:
        RemoteReadError: the last try failed so (chained from its error).
        FileNotFoundError and other lasting errors: at once, unchanged.
    """
    fs = fs if fs is not None else filesystem(url)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call(fs)
        except Exception as error:
            if not _transient(error):
                raise
            if attempt == ATTEMPTS:
                raise RemoteReadError(
                    f"Reading {url} failed {ATTEMPTS} times, the last with "
                    f"{type(error).__name__}: {error}. Check the URL, the network and the "
                    "credentials, then run again.",
                    url=url,
                    attempts=attempt,
                ) from error
            time.sleep(_BACKOFF_S * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


_pools: dict[tuple[int, int], concurrent.futures.ThreadPoolExecutor] = {}


def _thread_pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """This process's pool of `threads` threads for reads (made on first use)."""
    key = (os.getpid(), threads)
    if key not in _pools:
        _pools[key] = concurrent.futures.ThreadPoolExecutor(threads, "datarax-read")
    return _pools[key]


def on_threads(calls: Sequence[Callable[[], Any]], threads: int) -> list[Any]:
    """The values of `calls`, in order, made on `threads` threads at once (in this thread
    when `threads` is 1, there is one call, or this thread is a read thread itself: a
    pool never waits on itself); the first error raised is raised here."""
    nested = threading.current_thread().name.startswith("datarax-read")
    if threads <= 1 or len(calls) <= 1 or nested:
        return [call() for call in calls]
    futures = [_thread_pool(threads).submit(call) for call in calls]
    try:
        return [future.result() for future in futures]
    finally:
        for future in futures:
            future.cancel()
