"""Text documents, tokenized on the way: a field that holds text becomes token ids.

`Tokenizing` is the tokenizer, the name its lengths may be cached under, and the
end-of-text id it appends; it turns one text into a document, or names what went wrong.
Lengths come from one tokenizing pass (`count_tokens`): on this host's cores when the
tokenizer pickles and there are `PARALLEL_FROM` documents or more, else here. The
texts are read in this process, in order, and sent to the workers in batches; only the
lengths come back. `TextFile` is what a file kind whose field holds text builds on, and
`TextSequence` is the documents of texts in memory or in a dataset's string column.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import pickle
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, cast

import numpy as np

from datarax._validate import check_int, check_str
from datarax.errors import DocumentError
from datarax.pipeline.documents._contract import check_lengths
from datarax.pipeline.documents._index import (
    IndexedFile,
    changed_error,
    check_stamp,
    load_index,
    save_index,
)
from datarax.pipeline.documents._storage import on_threads
from datarax.pipeline.documents._values import field_of, item_at, read_only, where

PARALLEL_FROM = 4096  # documents from which the lengths pass runs on worker processes
BATCH_DOCUMENTS = 1024  # texts tokenized together (a worker's task), at most
BATCH_CHARACTERS = 4 << 20  # and characters of text, at most (one text more)
_LENGTHS = "text-lengths"  # the kind of the cache entries of tokenized lengths

# Turns a text into token ids: a sequence of ints, or a 1-D integer numpy array.
Tokenizer = Callable[[str], "Sequence[int] | np.ndarray"]
# One text to tokenize: (text, its document's index, its file or None, where in the file).
Text = tuple[str, int, str | None, str]


def _ids(result: Any) -> np.ndarray | None:
    """`result` as a 1-D integer array, or None where it is no sequence of ints."""
    if isinstance(result, np.ndarray):
        return result if result.ndim == 1 and result.dtype.kind in "iu" else None
    if isinstance(result, (str, bytes, bytearray, Mapping)):
        return None
    try:
        ids = np.asarray(result)
    except (ValueError, TypeError, OverflowError):  # ragged, or ints beyond any dtype
        return None
    if ids.shape == (0,):
        return np.empty(0, np.int64)
    return ids if ids.ndim == 1 and ids.dtype.kind in "iu" else None


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of dtype {value.dtype} and shape {value.shape}"
    kind, module = type(value).__qualname__, type(value).__module__
    return f"a {kind if module == 'builtins' else f'{module}.{kind}'}: {value!r:.60}"


@dataclasses.dataclass(frozen=True)
class Tokenizing:
    """How text becomes documents: `tokenizer`, the `name` its lengths may be cached
    under (None: never cached), and the `eos` id appended to each document."""

    tokenizer: Tokenizer
    name: str | None = None
    eos: int | None = None

    @property
    def key(self) -> str:
        """What tokenized lengths are cached under, with the file's path and field."""
        return f"{self.name}\0eos={self.eos}"

    def tokens(self, text: str, index: int, path: str | None = None, place: str = "") -> np.ndarray:
        """Document `index` (`text`, tokenized), a read-only 1-D integer array.

        Raises:
            DocumentError: the tokenizer raised, or returned no 1-D sequence of ints.

        Example:
            >>> Tokenizing(lambda s: list(s.encode()), eos=0).tokens("hi", 0)
            array([104, 105,   0])
        """
        try:
            result = self.tokenizer(text)
        except Exception as error:
            raise DocumentError(
                f"The tokenizer raised {type(error).__name__} on {where(index, path, place)}: "
                f"{error}",
                index=index,
                path=path,
            ) from error
        ids = _ids(result)
        if ids is None:
            hint = (
                f" Pass a callable that returns the ids, e.g. tokenizer=lambda s: "
                f"tok.encode(s).ids for a tokenizers.Tokenizer (its encode returns an "
                f"{type(result).__name__})."
                if hasattr(result, "ids")
                else ""
            )
            raise DocumentError(
                f"The tokenizer returned {_describe(result)} for {where(index, path, place)}, "
                f"not a 1-D sequence of token ids (ints).{hint}",
                index=index,
                path=path,
            )
        if self.eos is not None:
            if not np.can_cast(np.min_scalar_type(self.eos), ids.dtype):
                raise DocumentError(
                    f"The tokenizer returned ids of dtype {ids.dtype} for "
                    f"{where(index, path, place)}, which cannot hold append_eos={self.eos}; "
                    "return a list of ints, or a wider integer array.",
                    index=index,
                    path=path,
                )
            ids = np.append(ids, np.array(self.eos, ids.dtype))
        return read_only(ids)

    def pickles(self) -> bool:
        """Whether the tokenizer pickles, so that worker processes can run it."""
        try:
            pickle.dumps(self.tokenizer)
        except Exception:  # a lambda, a local function, an object holding a lock...
            return False
        return True

    def __getstate__(self) -> dict[str, Any]:
        if not self.pickles():
            raise TypeError(
                f"The tokenizer {self.tokenizer!r:.80} does not pickle, and worker processes "
                "need it: pass a function defined at a module's top level (or a "
                "functools.partial of one), not a lambda or a local function; or read in "
                "this process (workers=0)."
            )
        return dict(self.__dict__)


def tokenizing_of(tokenizer: Any, name: Any, eos: Any) -> Tokenizing | None:
    """The `Tokenizing` of `Documents`' arguments, None without a tokenizer.

    Raises:
        TypeError: `tokenizer` is not callable, `name` not a str, `eos` not an int.
        ValueError: `name` or `eos` without a tokenizer; `name` empty; `eos` outside
            ``[0, 2**31 - 1]``.

    Example:
        >>> tokenizing_of(None, None, None) is None
        True
    """
    if tokenizer is None:
        given = [n for n, v in (("tokenizer_name", name), ("append_eos", eos)) if v is not None]
        if given:
            raise ValueError(
                f"{given[0]}= is for text tokenized on the way, and no tokenizer= is given: "
                "pass tokenizer= too, or leave it out."
            )
        return None
    if not callable(tokenizer):
        raise TypeError(
            f"tokenizer must be a callable that turns a str into token ids, got "
            f"{type(tokenizer).__name__}: {tokenizer!r:.80}; e.g. tokenizer=lambda s: "
            "tok.encode(s).ids for a tokenizers.Tokenizer, or enc.encode for tiktoken."
        )
    if name is not None and not check_str("tokenizer_name", name):
        raise ValueError("tokenizer_name must not be empty: name the tokenizer, or pass None.")
    if eos is not None:
        eos = check_int("append_eos", eos, minimum=0, maximum=2**31 - 1, meaning="a token id")
    return Tokenizing(cast(Tokenizer, tokenizer), name, eos)


def text_of(value: Any, index: int, field: str, path: str | None = None, place: str = "") -> str:
    """The text in `value` (a str, or a mapping holding one under `field`).

    Raises:
        DocumentFieldError: `value` is a mapping without `field`.
        DocumentError: the value is not a str.

    Example:
        >>> text_of({"text": "the cat"}, 0, "text")
        'the cat'
    """
    name = where(index, path, place)
    value = field_of(value, index, field, path, place, "the text")
    if isinstance(value, str):
        return value
    what = "null" if value is None else _describe(value)
    raise DocumentError(
        f"{name} is {what}, not text (a str): with tokenizer= the documents are texts to "
        "tokenize. Leave tokenizer= out to read token ids.",
        index=index,
        path=path,
    )


def batches(texts: Iterable[Text]) -> Iterator[list[Text]]:
    """`texts` in lists of at most `BATCH_DOCUMENTS` texts or about `BATCH_CHARACTERS`."""
    batch: list[Text] = []
    size = 0
    for text in texts:
        batch.append(text)
        size += len(text[0])
        if len(batch) >= BATCH_DOCUMENTS or size >= BATCH_CHARACTERS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def tokenized(texts: list[Text], tokenizing: Tokenizing) -> list[np.ndarray]:
    """Each of `texts` tokenized, in order."""
    return [tokenizing.tokens(*text) for text in texts]


def _counts(texts: list[Text], tokenizing: Tokenizing) -> np.ndarray:
    """The token count of each of `texts`."""
    counts = (len(tokenizing.tokens(*text)) for text in texts)
    return np.fromiter(counts, np.int64, count=len(texts))


def joined(documents: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """`documents` back to back, and their lengths."""
    counts = np.fromiter(map(len, documents), np.int64, count=len(documents))
    return (np.concatenate(documents) if documents else np.zeros(0, np.int64)), counts


_in_worker: dict[str, Tokenizing] = {}  # a worker's tokenizers, unpickled once each


def _lengths_in_worker(payload: str, texts: list[Text]) -> np.ndarray:
    """The token counts of `texts`, tokenized by the `Tokenizing` pickled in `payload`."""
    tokenizing = _in_worker.get(payload)
    if tokenizing is None:
        with open(payload, "rb") as file:
            tokenizing = pickle.load(file)
        _in_worker.clear()
        _in_worker[payload] = tokenizing
    return _counts(texts, tokenizing)


def count_tokens(texts: Iterable[Text], count: int, tokenizing: Tokenizing) -> np.ndarray:
    """The token count of each of `texts` (`count` of them), in one tokenizing pass: on
    this host's cores when the tokenizer pickles and `count` is `PARALLEL_FROM` or more,
    else in this process.

    Raises:
        DocumentError: a text could not be tokenized (its document named; from a
            worker, the tokenizer's own error is named in the message, not chained).
        RuntimeError: a worker process died.
    """
    from datarax.pipeline.workers import usable_cores

    cores = min(usable_cores(), -(-count // BATCH_DOCUMENTS))
    if count < PARALLEL_FROM or cores < 2 or not tokenizing.pickles():
        counted = [np.zeros(0, np.int64), *(_counts(b, tokenizing) for b in batches(texts))]
        return np.concatenate(counted)
    return _count_on_workers(texts, tokenizing, cores)


def _count_on_workers(texts: Iterable[Text], tokenizing: Tokenizing, cores: int) -> np.ndarray:
    from datarax.pipeline.workers import leave_if_importing_main, task_pool

    leave_if_importing_main("counts the tokens of documents on worker processes")
    handle, payload = tempfile.mkstemp(prefix="datarax-tokenizer-", suffix=".pickle")
    pieces = [np.zeros(0, np.int64)]
    try:
        with os.fdopen(handle, "wb") as file:
            pickle.dump(tokenizing, file)
        with task_pool(cores) as pool:
            pending: collections.deque[concurrent.futures.Future[np.ndarray]] = collections.deque()
            for batch in batches(texts):  # at most two batches a process in flight
                pending.append(pool.submit(_lengths_in_worker, payload, batch))
                if len(pending) >= 2 * cores:
                    pieces.append(pending.popleft().result())
            while pending:
                pieces.append(pending.popleft().result())
    except concurrent.futures.process.BrokenProcessPool as error:
        raise RuntimeError(
            "A process counting the tokens of the documents died (out of memory, killed, or "
            'a script without `if __name__ == "__main__":` around its code, which every '
            "worker runs again on starting)."
        ) from error
    finally:
        with contextlib.suppress(OSError):
            os.unlink(payload)
    return np.concatenate(pieces)


class TextFile(IndexedFile):
    """A documents file whose field holds text, tokenized when read.

    A subclass gives `_texts` (the texts of documents ``[start, stop)`` in order, each
    checked) and `_read`; the lengths are counted in one pass over `_texts` (or several
    files' at once, `count_files`), kept in memory, and cached on disk only under the
    tokenizer's name.
    """

    def __init__(self, path: str, field: str, cache_dir: str, *, first: int, text: Tokenizing):
        self.text = text
        self._text_lengths: np.ndarray | None = None
        super().__init__(path, field, cache_dir, first=first)

    def _texts(self, start: int, stop: int) -> Iterator[Text]:
        raise NotImplementedError

    @property
    def _key(self) -> str:
        return f"{self.kind}\0{self.field}\0{self.text.key}"

    def _known(self) -> np.ndarray | None:
        """The lengths counted in this process, or cached under the tokenizer's name."""
        if self._text_lengths is None and self.text.name is not None:
            found = load_index(self.cache_dir, _LENGTHS, self.path, self._key, self.stamp)
            if found is not None and len(found.get("lengths", ())) == self.count:
                self._text_lengths = read_only(found["lengths"])
        return self._text_lengths

    def _remember(self, lengths: np.ndarray) -> None:
        """Keeps `lengths`, counted from the file now, and caches them if the tokenizer
        is named."""
        check_stamp(self.path, self.stamp)  # not changed while it was read
        if len(lengths) != self.count:
            raise changed_error(self.path, self.stamp, "its number of documents changed")
        self._text_lengths = read_only(lengths)
        if self.text.name is not None:
            index = {"lengths": self._text_lengths}
            save_index(self.cache_dir, _LENGTHS, self.path, self._key, self.stamp, index)

    @property
    def has_lengths(self) -> bool:
        return self.given is not None or self._known() is not None

    @property
    def lengths(self) -> np.ndarray:
        if self.given is not None:
            return self.given
        known = self._known()
        if known is None:
            count_files([self])
            known = cast(np.ndarray, self._text_lengths)
        return known

    def stream(self, start: int, stop: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Documents ``[start, stop)`` in order, as (tokens back to back, lengths), a batch
        of texts at a time, each tokenized once."""
        for batch in batches(self._texts(start, stop)):
            yield joined(tokenized(batch, self.text))

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        if self.text.name is not None:
            state["_text_lengths"] = None  # cached: reloaded where needed
        return state


def count_files(parts: Sequence[Any]) -> None:
    """Counts the tokens of every `TextFile` among `parts` whose lengths are not known,
    in one pass over all of them (so that many small files share the workers)."""
    todo = [part for part in parts if isinstance(part, TextFile) and not part.has_lengths]
    if not todo:
        return
    for part in todo:
        check_stamp(part.path, part.stamp)
    total = sum(part.count for part in todo)
    texts = chain.from_iterable(part._texts(0, part.count) for part in todo)
    lengths = count_tokens(texts, total, todo[0].text)
    ends = np.cumsum([part.count for part in todo])
    for part, piece in zip(todo, np.split(lengths, ends[:-1]), strict=True):
        part._remember(piece)


class TextSequence:
    """The documents of texts in memory: a sequence of str (or of dicts holding one under
    `field`), or a `datasets.Dataset` with a string column `field`; tokenized when read,
    their lengths counted when first asked for."""

    def __init__(
        self,
        data: Any,
        field: str,
        tokenizing: Tokenizing,
        lengths: np.ndarray | None,
        dataset: bool,
        threads: int = 1,
    ):
        if isinstance(data, Mapping):
            raise TypeError(
                f"data is a {type(data).__name__} (keys {list(map(str, data))[:5]}), not a "
                "sequence of texts: pass the column that holds the text, e.g. "
                "Documents(data['text'], tokenizer=...)."
            )
        if dataset:
            from datarax.pipeline.documents._arrow import DatasetTexts

            data = DatasetTexts(data, field)
        self.data, self.field, self.text = data, field, tokenizing
        # As `SequenceDocuments`: items in memory are read here, others on `threads`.
        self.threads = 1 if isinstance(data, (list, tuple, np.ndarray)) else threads
        self.count = len(data)
        self._lengths = None if lengths is None else check_lengths(lengths, count=self.count)

    def _values(self, indices: list[int]) -> list[Any]:
        getitems: Callable[[list[int]], Iterable[Any]] | None
        getitems = getattr(self.data, "__getitems__", None)
        if getitems is not None:
            return list(getitems(indices))
        return on_threads([functools.partial(item_at, self.data, i) for i in indices], self.threads)

    def _texts(self, start: int, stop: int) -> Iterator[Text]:
        for at in range(start, stop, BATCH_DOCUMENTS):
            indices = list(range(at, min(at + BATCH_DOCUMENTS, stop)))
            for index, value in zip(indices, self._values(indices), strict=True):
                yield text_of(value, index, self.field), index, None, ""

    @property
    def has_lengths(self) -> bool:
        return self._lengths is not None

    @property
    def lengths(self) -> np.ndarray:
        if self._lengths is None:
            counted = count_tokens(self._texts(0, self.count), self.count, self.text)
            self._lengths = read_only(counted)
        return self._lengths

    def read(self, indices: np.ndarray) -> list[np.ndarray]:
        asked = [int(i) for i in indices]
        values = self._values(asked)
        return [
            self.text.tokens(text_of(value, i, self.field), i)
            for value, i in zip(values, asked, strict=True)
        ]

    def stream(self, start: int, stop: int, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Documents ``[start, stop)`` in order, as (tokens back to back, lengths), each
        tokenized once."""
        for batch in batches(self._texts(start, stop)):
            yield joined(tokenized(batch, self.text))
