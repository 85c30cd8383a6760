"""The library a graded kernel imports (datarax, the course and the grader's kernel-side
scripts, copied fresh for each submission) holds no answer key and no key's code."""

from __future__ import annotations

from pathlib import Path

import datarax
import datarax_course
import datarax_grader
from datarax_course import _keys
from datarax_course.grading import keys_file
from datarax_grader._integrity import Library

KEY_NAMES = sorted(key.__name__ for key in [*_keys.KEYS.values(), *_keys.COUNTS.values()])


def test_the_graded_kernels_library_has_no_key_and_no_key_code() -> None:
    packages = [Path(m.__file__ or "").parent for m in (datarax, datarax_course, datarax_grader)]
    library = Library.of(packages, left_out=(keys_file().name,))
    assert any(name.startswith("datarax_course/") for name in library.files)
    assert "datarax_course/answer_keys.json" in library.files  # the public cases' table
    assert keys_file().name == Path(_keys.__file__).name
    assert not [name for name in library.files if name.endswith(keys_file().name)]
    for name, content in library.files.items():
        for key in KEY_NAMES:
            assert f"def {key}(" not in content.decode(errors="replace"), (name, key)
