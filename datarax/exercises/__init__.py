"""Checkers for the tutorials' exercises, and the tools to teach a class with them.

Each exercise cell in the notebooks ends with ``check("NN.name", your_function)``, which
says what is right or wrong with the answer and gives a hint (the idea first, then the
method); it never stops the notebook. The checkers compute the right answer from JAX
itself on the devices at hand, so they hold on 8 simulated CPU devices and on real chips
alike, and compare answers as plain values, never with the answer's own ``==``.

A quiz's answer is printed by `reveal` only once the reader has written theirs.

For a class: ``make student-notebooks`` writes copies without solutions or quiz
answers (``datarax/exercises/_students.py``), and ``python -m datarax.exercises.grade
SUBMISSIONS --out grades.csv`` grades the submitted notebooks (`datarax.exercises.grade`).
"""

from datarax.exercises import _nb01 as _nb01
from datarax.exercises import _nb02 as _nb02
from datarax.exercises import _nb03 as _nb03
from datarax.exercises import _nb04 as _nb04
from datarax.exercises import _nb05 as _nb05
from datarax.exercises import _nb06 as _nb06
from datarax.exercises import _nb07 as _nb07
from datarax.exercises import _nb08 as _nb08
from datarax.exercises import _nb09 as _nb09
from datarax.exercises import _nb10 as _nb10
from datarax.exercises import _nb11 as _nb11
from datarax.exercises import _real as _real
from datarax.exercises._core import Feedback as Feedback
from datarax.exercises._core import check as check
from datarax.exercises._quiz import reveal as reveal

__all__ = ["Feedback", "check", "reveal"]
