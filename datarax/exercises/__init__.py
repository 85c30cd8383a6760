"""Checkers for the tutorials' exercises.

Each exercise cell in the notebooks ends with ``check("NN.name", your_answer)``, which
says what is right or wrong with the answer and gives a hint; it never stops the
notebook. The checkers compute the right answer from JAX itself on the devices at
hand, so they hold on 8 simulated CPU devices and on real chips alike.
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
from datarax.exercises._core import Feedback as Feedback
from datarax.exercises._core import check as check

__all__ = ["Feedback", "check"]
