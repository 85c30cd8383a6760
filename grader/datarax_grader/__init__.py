"""The grader of the datarax-sharding tutorials: a tool for teachers, beside the library.

``datarax-grade SUBMISSIONS --out grades.csv`` (or ``python -m datarax_grader``) runs
every submitted notebook without its solution cells, each in a fresh kernel isolated
from the grader and from the other submissions, and writes one CSV row per student and
exercise (`datarax_grader.grade`). ``python grader/datarax_grader/_students.py OUT
NOTEBOOKS...`` writes the class's copies of the notebooks, without solutions or quiz
answers (`datarax_grader._students`). Install it from a checkout of the repository
with ``pip install ./grader``; docs/teaching.md says what each isolation protects.

This package imports nothing when imported itself: a graded kernel imports its
``_seccomp`` module before any other.
"""
