"""The errors datarax raises on purpose, by type, with the fields callers need.

Every class here also subclasses the built-in exception that the same check raises
(`ValueError`, `TypeError`, `RuntimeError`, `OSError`), so ``except ValueError`` keeps
working, and all of them subclass `DataraxError`. Catch them by type and read their
fields (the leaf, the stage, the process); the message is for people and may change.
Each error survives pickling with its fields and notes, so one raised in a pipeline
worker or a cluster process reaches the caller whole.

Example:
    >>> from datarax.errors import LeafShapeError
    >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    >>> try:
    ...     ArraySharder().shard({"label": np.arange(10)}, NamedSharding(mesh, P("data")))
    ... except LeafShapeError as error:
    ...     print(error.leaf, error.shape, error.axes, error.parts)
    batch['label'] (10,) ('data',) 8
"""

import inspect
import typing
from typing import Any, ClassVar

_REQUIRED: Any = object()  # the default of a field that has none
_EMPTY: Any = ()  # the default of a list or dict field: each error gets a new, empty one


def _rebuilt(kind: type[BaseException], args: tuple[Any, ...], fields: dict[str, Any]) -> Any:
    error = kind.__new__(kind, *args)
    error.args = args
    error.__dict__.update(fields)
    return error


class DataraxError(Exception):
    """The base of every error datarax raises on purpose.

    A subclass declares its fields as annotations (with a default where one may be left
    out) and lists them in its docstring's Attributes. Each is given by keyword after the
    message, e.g. ``LeafTypeError(message, leaf="batch['x']")``, and kept as an attribute;
    a field annotated as a tuple, list or dict holds a new one made of the value given.
    """

    _fields: ClassVar[dict[str, tuple[Any, Any]]] = {}  # name: (default, copy or None)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._fields = {}
        for klass in reversed(cls.__mro__):  # a base's fields first
            for name, note in inspect.get_annotations(klass, eval_str=True).items():
                if not name.startswith("_"):
                    origin = typing.get_origin(note)
                    copy = origin if origin in (tuple, list, dict) else None
                    cls._fields[name] = (klass.__dict__.get(name, _REQUIRED), copy)

    def __init__(self, message: str, /, **fields: Any) -> None:
        known = type(self)._fields
        wrong = {
            "missing": [n for n, (d, _) in known.items() if d is _REQUIRED and n not in fields],
            "unknown": [name for name in fields if name not in known],
        }
        if any(wrong.values()):
            said = "; ".join(f"{k} field(s) {', '.join(v)}" for k, v in wrong.items() if v)
            raise TypeError(
                f"{type(self).__name__}: {said}. Its fields, given by keyword after the "
                f"message, are: {', '.join(known) or 'none'}."
            )
        for name, (default, copy) in known.items():
            value = fields.get(name, default)
            setattr(self, name, value if copy is None else copy(value))
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        # The default pickles only args, and would call __init__ without the fields.
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


class LeafTypeError(DataraxError, TypeError):
    """A leaf cannot become a `jax.Array` (text, an object, a dtype the devices lack, a
    deleted array, a container `jax.tree_util` does not know).

    Attributes:
        leaf: the leaf's name, e.g. ``batch['label']``.
    """

    leaf: str


class LeafValueError(DataraxError, ValueError):
    """A leaf holds a value that cannot become a `jax.Array` (a python int too large for
    JAX's integer type, a scalar where rows are needed).

    Attributes:
        leaf: the leaf's name, e.g. ``batch['label']``.
    """

    leaf: str


class LeafShapeError(DataraxError, ValueError):
    """A leaf's shape does not fit the sharding: too many spec entries for its rank, or a
    dimension that does not split evenly over the mesh axes sharding it.

    Attributes:
        leaf: the leaf's name, e.g. ``batch['label']``.
        shape: the leaf's shape.
        dim: the dimension that does not fit.
        axes: the mesh axes that dimension is split over (empty for a rank error).
        parts: how many equal parts those axes need (0 for a rank error).
    """

    leaf: str
    shape: tuple[int, ...]
    dim: int
    axes: tuple[str, ...] = ()
    parts: int = 0


class RowCountError(DataraxError, ValueError):
    """The leaves of one batch or source differ in their number of rows.

    Attributes:
        rows: each leaf's name and row count.
    """

    rows: dict[str, int]


class MeshError(DataraxError, ValueError):
    """A sharding cannot be used: its spec names an axis the mesh lacks or one twice, its
    mesh lists a device twice, or it uses devices no started backend lists.
    """


class HostMismatchError(DataraxError, ValueError):
    """The hosts passed what cannot make one global batch or one pipeline (other structures,
    dtypes, row counts, replicated data, states or settings); raised alike on every host.

    Attributes:
        what: what they disagree on, e.g. ``"dtype"`` or ``"the pipeline's state"``.
        values: each process's value, in process order.
        processes: the processes at odds (those whose values differ from the others').
        leaf: the leaf concerned, when there is one.
    """

    what: str
    values: list[Any] = _EMPTY
    processes: tuple[int, ...] = ()
    leaf: str | None = None


class ExchangeTimeoutError(DataraxError, RuntimeError):
    """A process did not reach an exchange between hosts in time.

    Attributes:
        process: the process that did not arrive.
        what: the call that exchanged, e.g. ``"shard()"``.
    """

    process: int
    what: str


class StageStopIterationError(DataraxError, RuntimeError):
    """A stage or a source raised `StopIteration`, which would end an epoch in silence.

    Attributes:
        stage: where, e.g. ``stages[1]`` or ``the source's __getitem__``.
    """

    stage: str


class SupersededIteratorError(DataraxError, RuntimeError):
    """An iterator over a pipeline was used after a newer ``iter()`` or ``set_state``."""


class PipelineStateError(DataraxError, ValueError):
    """A pipeline state is malformed, or does not fit the pipeline it is given to.

    Attributes:
        key: the entry of the state at fault, when one is.
    """

    key: str | None = None


class SourceChangedError(DataraxError, ValueError):
    """A pipeline's source has another length than when the pipeline was built, or a
    document a `Packed` reads another length than its plan was made for.

    Attributes:
        built: the length then.
        now: the length now.
    """

    built: int
    now: int


class SourceFileChangedError(DataraxError, RuntimeError):
    """A file that a pipeline's source maps, or a `Documents` reads, changed since built.

    Attributes:
        path: the file.
    """

    path: str


class NotPicklableError(DataraxError, TypeError):
    """The source or a stage cannot reach worker processes (``workers=N``), or the batch
    or error a stage made in one cannot come back.

    Attributes:
        part: which, e.g. ``"source"``, ``"stages[2]"``, ``"the batch"``, ``"an error"``.
    """

    part: str


class WorkerError(DataraxError, RuntimeError):
    """A pipeline's worker process died or refused to run, or a stage in one called
    ``sys.exit`` or raised an error that cannot be rebuilt in this process.

    Attributes:
        exit_codes: the workers' exit codes, where known.
    """

    exit_codes: list[int | None] = _EMPTY


class NoMainGuardError(WorkerError):
    """Worker processes ended as they started: the script that iterates a pipeline with
    workers has no ``if __name__ == "__main__":``.

    Attributes:
        exit_codes: the workers' exit codes.
    """


class WorkerDeviceError(DataraxError, RuntimeError):
    """A host stage in a worker process started JAX on an accelerator.

    Attributes:
        stage: where, e.g. ``stages[0]``.
        platform: the platform JAX started on.
    """

    stage: str
    platform: str


class WorkerArrayError(DataraxError, TypeError):
    """A host stage in a worker process returned jax.Arrays instead of host data.

    Attributes:
        stage: where, e.g. ``stages[0]``.
    """

    stage: str


class OutputArrayError(DataraxError, TypeError):
    """`output_array` was asked for an array that shared memory cannot carry (an object
    dtype, whose elements are references into one process's memory).

    Attributes:
        dtype: the dtype asked for.
        stage: where it was asked for, e.g. ``stages[0]`` (empty outside a pipeline).
    """

    dtype: str
    stage: str = ""


class CheckpointSaveError(DataraxError, OSError):
    """A save failed; the steps saved before it are still listed and restorable.

    Attributes:
        step: the step that was being saved.
        folder: its temporary folder, removed again.
    """

    step: int
    folder: str


class ClusterError(DataraxError, RuntimeError):
    """A process of a local cluster failed; `process_index` names the first one.

    Attributes:
        process_index: the first process that failed, or after a time-out the first
            whose target had not returned.
        outputs: every process's output, in process order (of a longer one only the
            last 64 KiB, after a line saying how much was left out).
        signal: the name of the signal that ended the process to blame (``"SIGSEGV"``
            when it crashed, ``"SIGKILL"`` when something killed it); None when it
            exited, raised, or was still running when the launcher stopped it.
    """

    process_index: int | None
    outputs: list[str]
    signal: str | None = None


class EnvironmentVariableError(DataraxError, ValueError):
    """An environment variable holds a value that cannot be used: one that JAX refuses,
    or one that a local cluster's processes must not get.

    Attributes:
        variable: its name, e.g. ``JAX_PLATFORMS``.
        value: the value refused.
    """

    variable: str
    value: str


class CheckpointTemplateError(DataraxError, ValueError):
    """The model given to `Checkpoints.restore` as a template has other leaves, or leaves
    of other shapes, than the model saved at that step. Nothing was restored.

    Attributes:
        step: the step asked for.
        missing: the saved leaves the template lacks, e.g. ``("model['b']",)``.
        unexpected: the template's leaves that were not saved.
        shapes: each leaf whose shape differs, as ``{leaf: (saved shape, template shape)}``.
    """

    step: int
    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = _EMPTY


class CheckpointDamagedError(DataraxError, ValueError, KeyError):
    """A saved step cannot be read: a folder of it is missing, or a file of it is cut
    short or holds what no save writes. Nothing was restored, and the pipeline given to
    `Checkpoints.restore` keeps its position. A `ValueError` and a `KeyError`, as Orbax's
    errors for a file cut short and a missing folder are, so code catching those works.

    Attributes:
        step: the step asked for.
        path: the folder or file at fault.
    """

    step: int
    path: str

    def __str__(self) -> str:  # KeyError would show the message in quotes
        return str(self.args[0]) if self.args else ""


class DocumentError(DataraxError, ValueError):
    """A document is not a 1-D array of integers (floats, 2-D, text, null, a record
    without the field holding its tokens).

    Attributes:
        index: the document's index in its `Documents`; None where a whole file or
            column is at fault.
        path: the file it is in; None for documents in memory.
    """

    index: int | None
    path: str | None = None


class DocumentLengthError(DocumentError):
    """A document has another number of tokens than its entry in the ``lengths`` passed.

    Attributes:
        index: the document's index in its `Documents`.
        path: the file it is in; None for documents in memory.
        length: the number of tokens read.
        expected: its entry in ``lengths``.
    """

    length: int
    expected: int


class DocumentFieldError(DocumentError):
    """The field that holds the tokens is missing, or is not a list of integers.

    Attributes:
        field: the field asked for, e.g. ``"tokens"``.
        columns: the fields there are, e.g. ``("text", "input_ids")``.
        index: the document that lacks it; None where a whole file or column does.
        path: the file; None for documents in memory.
    """

    field: str
    columns: tuple[str, ...] = ()
    index: int | None = None


class DocumentFileNotFoundError(DataraxError, FileNotFoundError):
    """A path or glob pattern given as documents names no file.

    Attributes:
        pattern: the path or pattern, as given.
    """

    pattern: str


class DocumentFormatError(DataraxError, ValueError):
    """A file given as documents is of a format `Documents` does not read (told by its
    extension), or is not what its format says (an index of Megatron's format of another
    magic, version or dtype code, a ``.bin`` shorter than its index, a damaged manifest).

    Attributes:
        path: the file.
    """

    path: str


class RemoteReadError(DataraxError, OSError):
    """A file of a URL could not be read: a fetch failed on every try (a timeout, a
    dropped connection, a server error), or the server ignores byte ranges.

    Attributes:
        url: the file.
        attempts: how many times it was tried.
    """

    url: str
    attempts: int


class StoreWriteError(DataraxError, RuntimeError):
    """`write_documents` failed on another process of the cluster; the process where it
    failed raises its own error, and every process leaves the store unwritten.

    Attributes:
        process: the process where it failed.
    """

    process: int
