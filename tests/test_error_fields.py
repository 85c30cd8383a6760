"""Every error class in `datarax.errors` is its docstring and its annotated fields: the
docstring's Attributes name exactly the fields, each class pickles with them, and its
fields are given by keyword, all the required ones and no others."""

import inspect
import pickle
import re
import types
import typing
from typing import Any

import pytest

from datarax import errors
from datarax.errors import DataraxError, DocumentError, DocumentLengthError
from datarax.pipeline import Documents

CLASSES = sorted(
    (
        kind
        for kind in vars(errors).values()
        if isinstance(kind, type)
        and issubclass(kind, BaseException)
        and kind.__module__ == errors.__name__
    ),
    key=lambda kind: kind.__name__,
)
BUILT_INS = (ValueError, TypeError, RuntimeError, OSError)


def _ids(kind: type) -> str:
    return kind.__name__


def _documented(kind: type) -> list[str]:
    """The names the Attributes section of `kind`'s own docstring lists."""
    lines = inspect.cleandoc(kind.__dict__.get("__doc__") or "").splitlines()
    if "Attributes:" not in lines:
        return []
    names = []
    for line in lines[lines.index("Attributes:") + 1 :]:
        if line.strip() and not line.startswith(" "):
            break  # the section ended
        entry = re.fullmatch(r" {4}(\w+): \S.*", line)
        if entry:
            names.append(entry.group(1))
    return names


def _annotated(kind: type) -> dict[str, Any]:
    """The public annotated fields of `kind` and its bases, a base's first."""
    fields: dict[str, Any] = {}
    for klass in reversed(kind.__mro__):
        for name, note in inspect.get_annotations(klass, eval_str=True).items():
            if not name.startswith("_"):
                fields[name] = note
    return fields


def _required(kind: type) -> list[str]:
    return [name for name in _annotated(kind) if not hasattr(kind, name)]


def _dummy(note: Any, name: str) -> Any:
    """A value of the type `note` declares, distinct per field."""
    options = [a for a in typing.get_args(note) if a is not type(None)]
    if isinstance(note, types.UnionType) or typing.get_origin(note) is typing.Union:
        return _dummy(options[0], name)
    origin = typing.get_origin(note) or note
    if origin is tuple:
        return (f"{name}-0", f"{name}-1")
    if origin is list:
        return [f"{name}-0", None]
    if origin is dict:
        return {f"{name}-key": (1, 2)}
    if origin is int:
        return len(name)
    return f"{name}-value"


def _fields(kind: type) -> dict[str, Any]:
    return {name: _dummy(note, name) for name, note in _annotated(kind).items()}


def test_the_module_is_walked() -> None:
    assert DataraxError in CLASSES and DocumentLengthError in CLASSES
    assert len(CLASSES) >= 30


@pytest.mark.parametrize("kind", CLASSES, ids=_ids)
def test_the_attributes_documented_are_the_fields(kind: type) -> None:
    documented = _documented(kind)
    assert len(documented) == len(set(documented)), documented
    assert set(documented) == set(_annotated(kind)), kind.__name__
    assert list(typing.cast(Any, kind)._fields) == list(_annotated(kind))


@pytest.mark.parametrize("kind", CLASSES, ids=_ids)
def test_each_error_is_a_datarax_error_and_a_built_in(kind: type) -> None:
    assert issubclass(kind, DataraxError)
    assert kind is DataraxError or issubclass(kind, BUILT_INS)


@pytest.mark.parametrize("kind", CLASSES, ids=_ids)
def test_each_error_keeps_its_fields_and_message(kind: type) -> None:
    given = _fields(kind)
    error = kind("the message", **given)
    assert {name: getattr(error, name) for name in given} == given
    assert str(error) == "the message" and error.args == ("the message",)


@pytest.mark.parametrize("kind", CLASSES, ids=_ids)
def test_each_error_pickles_with_its_fields_and_notes(kind: type) -> None:
    error = kind("the message", **_fields(kind))
    error.add_note("a note")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is kind
    assert copy.__dict__ == error.__dict__
    assert (str(copy), copy.args, copy.__notes__) == ("the message", error.args, ["a note"])


@pytest.mark.parametrize("kind", CLASSES, ids=_ids)
def test_fields_left_out_take_their_defaults(kind: type) -> None:
    given = {name: value for name, value in _fields(kind).items() if name in _required(kind)}
    error = kind("m", **given)
    for name, note in _annotated(kind).items():
        if name not in given:
            origin = typing.get_origin(note)
            kept = origin if origin in (tuple, list, dict) else None  # holds a new one
            default = getattr(kind, name)
            assert getattr(error, name) == (kept(default) if kept else default), name


@pytest.mark.parametrize("kind", [k for k in CLASSES if _required(k)], ids=_ids)
def test_a_missing_field_is_a_type_error_naming_it(kind: type) -> None:
    for name in _required(kind):
        given = {k: v for k, v in _fields(kind).items() if k != name}
        with pytest.raises(TypeError, match=rf"{kind.__name__}: missing field\(s\) {name}\."):
            kind("m", **given)


@pytest.mark.parametrize("kind", CLASSES, ids=_ids)
def test_an_unknown_field_is_a_type_error_naming_it(kind: type) -> None:
    with pytest.raises(TypeError, match=r"unknown field\(s\) colour, size\. Its fields"):
        kind("m", **_fields(kind), colour="red", size=3)


@pytest.mark.parametrize("kind", CLASSES, ids=_ids)
def test_positional_fields_are_refused(kind: type) -> None:
    values = list(_fields(kind).values()) or ["a field"]
    with pytest.raises(TypeError, match="positional argument"):
        kind("m", *values)


def test_container_fields_hold_copies_and_defaults_are_not_shared() -> None:
    given = ["text", "ids"]
    error = errors.DocumentFieldError("m", field="ids", columns=given)
    given.append("more")
    assert error.columns == ("text", "ids")
    first = errors.HostMismatchError("m", what="dtype")
    first.values.append("float32")
    assert errors.HostMismatchError("m", what="dtype").values == []
    assert errors.CheckpointTemplateError("m", step=1).shapes == {}


def test_a_document_of_another_length_than_passed_is_a_document_length_error() -> None:
    docs = Documents([[1, 2], [3]], lengths=[2, 2])
    with pytest.raises(DocumentError, match=r"document 1 has 1 tokens, but lengths\[1\] is 2"):
        docs.read([1])
    with pytest.raises(DocumentLengthError) as raised:
        docs.read([0, 1])
    error = raised.value
    assert isinstance(error, ValueError)
    assert (error.index, error.path, error.length, error.expected) == (1, None, 1, 2)
