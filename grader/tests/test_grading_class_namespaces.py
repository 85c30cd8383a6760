"""The class of test_grading_class.py graded again with each kernel in namespaces of its
own (user, mount, PID and network), where this machine has them; where it has none, the
grader's refusal is tested there instead and this file holds no test.
"""

from __future__ import annotations

import pytest
import test_grading_class as seccomp_class

pytestmark = pytest.mark.notebooks

if seccomp_class.WHY_NOT is None:
    from test_grading_class import *  # noqa: F403  (the same tests, on this file's class)

    # Not graded twice: this one needs no class.
    del test_the_grader_says_which_isolation_it_uses_and_refuses_one_it_lacks  # noqa: F821

    @pytest.fixture(scope="module")
    def graded(tmp_path_factory: pytest.TempPathFactory) -> seccomp_class.Graded:
        return seccomp_class._grade(tmp_path_factory.mktemp("class-namespaces"), "namespaces")
