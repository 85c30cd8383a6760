"""The course beside the library: the tutorials' exercise checkers, quizzes and figures.

Each exercise cell in the notebooks ends with ``check("NN.name", your_function)``, which
says what is right or wrong with the answer and gives a hint (the idea first, then the
method); it never stops the notebook. The checkers compute the right answer from JAX
itself on the devices at hand, so they hold on 8 simulated CPU devices and on real chips
alike, and compare answers as plain values, never with the answer's own ``==``. The
answers to the notebooks' public cases that are formulas of the lessons' own are data,
``answer_keys.json``, written by ``python -m datarax_course._keys``.

A quiz's answer is printed by `reveal` only once the reader has written theirs.
`datarax_course.figures` holds the lesson figures and the playground.

The course uses the library's public names (`datarax.sharding`, `datarax.pipeline`,
`datarax.distributed`, `datarax.viz`) and, for the checks whose wording it shares with
the library, the private modules `tests/test_layout.py` names (imported in
`datarax_course._checks` and `datarax_course.figures._frame`); the library never
imports the course. For a class, the grader is a tool of its own beside it
(``pip install ./grader``, then ``datarax-grade SUBMISSIONS --out grades.csv``; see
docs/teaching.md).
"""

from datarax_course import _nb01 as _nb01
from datarax_course import _nb02 as _nb02
from datarax_course import _nb03 as _nb03
from datarax_course import _nb04 as _nb04
from datarax_course import _nb05 as _nb05
from datarax_course import _nb06 as _nb06
from datarax_course import _nb07 as _nb07
from datarax_course import _nb08 as _nb08
from datarax_course import _nb09 as _nb09
from datarax_course import _nb10 as _nb10
from datarax_course import _nb11 as _nb11
from datarax_course import _nb12 as _nb12
from datarax_course import _nb12_mesh as _nb12_mesh
from datarax_course import _nb13 as _nb13
from datarax_course import _nb14 as _nb14
from datarax_course import _real as _real
from datarax_course._core import Feedback as Feedback
from datarax_course._core import check as check
from datarax_course._quiz import reveal as reveal

__all__ = ["Feedback", "check", "reveal"]
