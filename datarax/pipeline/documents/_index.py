"""A documents file's index: computed once, cached on disk, checked against the file.

An index is a few arrays (the documents' lengths, where each one lies in the file). It
is cached in one ``.npz`` per file and field, valid for the file's absolute path, size,
modification time (``st_mtime_ns``) and field: a changed file finds its entry stale and
is indexed afresh (its entry is then replaced). Entries are written to a temporary file
and moved into place, so a reader never sees half of one; a cache folder that cannot be
written means no caching, never an error.

`IndexedFile` is what a file of one format builds on: its copy in a worker process
pickles only the path, field, stamp and cache folder, and reloads the index there.

Indexes that are read by memory map (a flat token file's, the lengths of several indexed
files in one array, a packing plan) are folders of files instead: `cached_folder` makes
one once, in a temporary folder moved into place, beside a ``key`` file that says what it
was made from; the folder's name holds a digest of its key, so another key (a changed
file) makes another folder and a folder in place is never replaced.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from datarax.errors import RemoteReadError, SourceFileChangedError
from datarax.pipeline.documents._storage import Stamp, is_url, open_binary, stamp_of

Index = dict[str, np.ndarray]
_VERSION = "1"  # part of every entry's key: a new layout of entries makes old ones stale


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/datarax-sharding/documents``, else under ``~/.cache``.

    Example:
        >>> default_cache_dir().endswith(os.path.join("datarax-sharding", "documents"))
        True
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return os.path.join(base, "datarax-sharding", "documents")


def changed_error(path: str, then: Stamp, why: str) -> SourceFileChangedError:
    version = "st_mtime_ns" if isinstance(then[1], int) else "version"
    return SourceFileChangedError(
        f"The documents file {path} is no longer as it was when its Documents was built "
        f"({then[0]} bytes, {version} {then[1]}): {why}. The lengths and offsets read "
        "then no longer describe it; build a new Documents over the file as it is now.",
        path=path,
    )


RECHECK_S = 5.0  # how long a remote file's stamp, once checked, is trusted in a process
_checked: dict[tuple[str, Stamp], float] = {}
_locks: dict[str, threading.Lock] = {}


def check_stamp(path: str, then: Stamp, *, now: bool = False) -> None:
    """Raises `SourceFileChangedError` naming `path` when its size or version moved.

    A local file is checked at every call (a ``stat``); a remote one when a process first
    asks and then at most every `RECHECK_S` seconds (each check is a request), and at
    once with `now` (a read came back short).
    """
    if not is_url(path):
        _compare(path, then)
        return
    with _locks.setdefault(path, threading.Lock()):  # one thread asks; the others wait
        if now or time.monotonic() - _checked.get((path, then), -RECHECK_S) >= RECHECK_S:
            _compare(path, then)
            _checked[(path, then)] = time.monotonic()


def stamp_now(path: str) -> Stamp:
    """`path`'s stamp (`stamp_of`), which counts as checked now."""
    stamp = stamp_of(path)
    if is_url(path):
        _checked[(path, stamp)] = time.monotonic()
    return stamp


def _compare(path: str, then: Stamp) -> None:
    try:
        current = stamp_of(path)
    except RemoteReadError:
        raise  # the store did not answer: nothing is known to have changed
    except OSError as error:
        raise changed_error(path, then, f"it cannot be found or read ({error})") from None
    if current[0] != then[0]:
        raise changed_error(path, then, f"it has {current[0]} bytes now")
    if current[1] != then[1]:
        raise changed_error(path, then, f"it was modified (version {current[1]} now)")


def _entry(cache_dir: str, kind: str, path: str, field: str) -> str:
    """The one entry of `path` and `field`: a stale one is replaced, not kept beside."""
    name = hashlib.sha256(f"{kind}\0{path}\0{field}".encode()).hexdigest()[:32]
    return os.path.join(cache_dir, f"{name}.npz")


def _key(kind: str, path: str, field: str, stamp: Stamp) -> str:
    return f"v{_VERSION}\0{kind}\0{path}\0{field}\0{stamp[0]}\0{stamp[1]}"


def load_index(cache_dir: str, kind: str, path: str, field: str, stamp: Stamp) -> Index | None:
    """The cached index of `path` at `stamp`, or None (no entry, a stale or damaged one)."""
    entry = _entry(cache_dir, kind, path, field)
    try:
        with np.load(entry, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # damaged: rebuilt
        return None
    if "key" not in arrays or str(arrays.pop("key")) != _key(kind, path, field, stamp):
        return None
    return arrays


def save_index(
    cache_dir: str, kind: str, path: str, field: str, stamp: Stamp, index: Index
) -> None:
    """Writes `index` as `path`'s entry at `stamp`; does nothing where that fails."""
    entry = _entry(cache_dir, kind, path, field)
    temporary = None
    try:
        os.makedirs(cache_dir, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=cache_dir, suffix=".tmp")
        with os.fdopen(handle, "wb") as file:
            arrays: dict[str, Any] = {**index, "key": np.array(_key(kind, path, field, stamp))}
            np.savez(file, **arrays)
        os.replace(temporary, entry)
    except BaseException as error:  # a Ctrl-C too: no temporary file is left behind
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if not isinstance(error, OSError):
            raise


def read_key(folder: str) -> str | None:
    """The key a cached folder was made for; None where it has none (or is no folder)."""
    try:
        with open(os.path.join(folder, "key"), encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError):
        return None


def entry_folder(cache_dir: str, name: str, key: str) -> str:
    """The folder of entry `name` made for `key`: a key of its own names a folder of its
    own, so a folder in place is never replaced while another process reads it.

    Example:
        >>> os.path.basename(entry_folder("/cache", "plan", "v1")).startswith("plan.")
        True
    """
    return os.path.join(cache_dir, f"{name}.{hashlib.sha256(key.encode()).hexdigest()[:16]}")


def cached_folder(cache_dir: str, name: str, key: str, make: Callable[[str], None]) -> str:
    """The folder of entry `name` of `cache_dir` once it holds what `make(folder)` writes
    for `key`: kept from an earlier call with the same key, else made now (the entry's
    folders of other keys, stale, are then removed). Where `cache_dir` cannot be written,
    it is made in a temporary folder removed when this process exits.

    Raises:
        whatever `make` raises (nothing is left behind then).
    """
    folder = entry_folder(cache_dir, name, key)
    if read_key(folder) == key:
        return folder
    try:
        os.makedirs(cache_dir, exist_ok=True)
        making, in_cache = tempfile.mkdtemp(dir=cache_dir, suffix=".tmp"), True
    except OSError:
        making, in_cache = tempfile.mkdtemp(prefix="datarax-index-"), False
        atexit.register(shutil.rmtree, making, True)
    try:
        make(making)
        with open(os.path.join(making, "key"), "w", encoding="utf-8") as file:
            file.write(key)
    except BaseException:
        shutil.rmtree(making, ignore_errors=True)
        raise
    if not in_cache:
        return making
    try:
        os.rename(making, folder)  # fails where another process placed it a moment ago
    except OSError:
        if read_key(folder) != key:  # a damaged folder in the way: this process keeps its own
            atexit.register(shutil.rmtree, making, True)
            return making
        shutil.rmtree(making, ignore_errors=True)
        return folder
    for entry in os.listdir(cache_dir):  # stale: made for keys of files since changed
        if entry.startswith(f"{name}.") and entry != os.path.basename(folder):
            shutil.rmtree(os.path.join(cache_dir, entry), ignore_errors=True)
    return folder


def local_copy(url: str, stamp: Stamp, cache_dir: str) -> str:
    """A local copy of the remote file `url` (an index: small beside its tokens), fetched
    once a host into `cache_dir` and kept while `url` keeps `stamp`, so it can be mapped."""

    def make(folder: str) -> None:
        with open_binary(url) as source, open(os.path.join(folder, "copy"), "wb") as target:
            shutil.copyfileobj(source, target, 8 << 20)
        copied = os.path.getsize(os.path.join(folder, "copy"))
        if copied != stamp[0]:  # never kept: a short copy would be read at every open
            check_stamp(url, stamp, now=True)  # raises where the file changed
            raise RemoteReadError(
                f"Copying {url} gave {copied} bytes where it has {stamp[0]}; run again.",
                url=url,
                attempts=1,
            )

    folder = cached_folder(cache_dir, entry_name("copy", url), f"{url}\0{stamp}", make)
    return os.path.join(folder, "copy")


def entry_name(*parts: object) -> str:
    """A cache entry's name, from what identifies it (not what makes it stale).

    Example:
        >>> len(entry_name("flat", "/data/tokens.npy"))
        32
    """
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:32]


class IndexedFile:
    """One documents file: its index, loaded once per process, and reads that check it.

    The index is where each document lies, read when the file is opened (a Parquet
    file's metadata, a pass over a JSON Lines file's line ends); each document's length
    joins it when first asked for (`lengths`), which reads every document once, unless
    the caller passed them. A subclass sets `kind`, `_compute` (the index from the file;
    with ``"lengths"`` when asked) and `_read` (documents by their index within the file,
    in the order asked). `first` is the global index of the file's first document, for
    error messages.
    """

    kind: ClassVar[str]

    def __init__(self, path: str, field: str, cache_dir: str, *, first: int):
        self.path, self.field, self.cache_dir, self.first = path, field, cache_dir, first
        self.stamp = stamp_now(path)
        self.given: np.ndarray | None = None  # lengths the caller passed, once checked
        self._index: Index | None = self._load(False)  # now: bad input fails here

    def _load(self, with_lengths: bool) -> Index:
        check_stamp(self.path, self.stamp)
        index = load_index(self.cache_dir, self.kind, self.path, self.field, self.stamp)
        if index is None or (with_lengths and "lengths" not in index):
            index = self._compute(with_lengths)
            check_stamp(self.path, self.stamp)  # not changed while it was read
            save_index(self.cache_dir, self.kind, self.path, self.field, self.stamp, index)
        return index

    @property
    def index(self) -> Index:
        """The index, loaded (from the cache, or the file) on first use in each process."""
        if self._index is None:
            self._index = self._load(False)
        return self._index

    @property
    def count(self) -> int:
        raise NotImplementedError

    @property
    def has_lengths(self) -> bool:
        """Whether the lengths are known without reading the documents."""
        return self.given is not None or "lengths" in self.index

    @property
    def lengths(self) -> np.ndarray:
        """Every document's length: given, cached, or read now (and cached)."""
        if self.given is not None:
            return self.given
        if "lengths" not in self.index:
            self._index = self._load(True)
        return self.index["lengths"]

    def read(self, local: np.ndarray) -> list[np.ndarray]:
        """Documents `local` (indices within this file, in range), in that order."""
        check_stamp(self.path, self.stamp)
        return self._read(local)

    def _compute(self, with_lengths: bool) -> Index:
        raise NotImplementedError

    def _read(self, local: np.ndarray) -> list[np.ndarray]:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_index"] = None  # reloaded from the cache, or computed again, where needed
        return state
