"""`python -m datarax_grader` grades a class of tutorial 07's exercise the way a
teacher would: the saboteurs first, then the cheats, then honest students, and each
case has its test. The grader runs from a copy of the package (so no notebook can reach
this checkout through it), with a teacher's home of its own, once with each isolation
this machine offers: user, mount, PID and network namespaces where Linux allows them,
and the seccomp filter that the grader falls back to.

Saboteurs: one rewrites the library it imports, one rewrites the script its parent runs,
one stops every process it runs under, one deletes its scratch folder's parent, one
leaves an IPython startup file in its home, one prints without end, one leaves a
detached process writing to the grades, one kills its parent. Cheats: an answer key
copied in a thread, or recompiled from its source; a recorder that replays answers;
the tutorial's solution read from the original notebook or rebuilt from its text
file; a notebook that imports the key. Each of them writes its own answer only through
those means; an honest student's answer is right whoever ran before it.

Then the exercises whose right answers the judging machine computes (07.predicted_epoch,
11.attention_mask, 12.collectives_of, 14.bytes_per_device), in notebooks of their own:
a student who borrows the checker's reference (imports it from the checker's module,
walks the stack to the checker's frame, calls the lesson's own helpers, times a loop
rebuilt from the checker's source or from sleeps), and one who answers honestly; in the
same notebooks, 12.which_mesh, a formula whose key a kernel cannot import either, and
whose notebook answers, read from the keys' table, miss the cases drawn for grading.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from datarax_grader import _sandbox

pytestmark = pytest.mark.notebooks

ROOT = Path(__file__).parents[2]
NOTEBOOK = ROOT / "tutorials" / "07_performance.ipynb"
TIME_LIMIT = 30  # seconds per notebook: a kernel and JAX start on 2 busy cores
RIGHT = """\
def epoch_ms(step_ms, input_ms, steps, prefetch):
    if not prefetch:
        return steps * (step_ms + input_ms)
    return input_ms + step_ms + (steps - 1) * max(step_ms, input_ms)
"""
SAW_A_HINT = "Not yet: not answered yet. Hint: without prefetch every step waits ..."
MARKER = "MARKER: graded as right by a rewritten runner"

# Saboteurs ------------------------------------------------------------------------------

REWRITE_LIBRARY = """\
import json, os
import datarax_course._grading as grading
forged = '''
def harvest(functions, namespace, seed, out):
    import json
    answers = {name: [{"value": 0.0}] * 40 for name in functions}
    open(out, "w").write(json.dumps({"devices": 8, "answers": answers}))
'''
for path in (grading.__file__, os.environ.get("PYTHONPATH", "").split(":")[0]):
    try:
        os.chmod(os.path.dirname(grading.__file__), 0o755)
        os.chmod(grading.__file__, 0o644)
        with open(grading.__file__, "a") as module:
            module.write(forged)
    except OSError as error:
        print("refused:", error)
"""

REWRITE_RUNNER = f"""\
import os
forged = '''
import json, sys
plan = json.loads(sys.stdin.read())
if {MARKER!r} in open(plan["notebook"]).read():
    answers = plan["harvest"].split("globals(), ")[1].split(", ")[1].strip("')")
    forged = {{"devices": 8, "answers": {{"07.epoch_ms": [{{"value": 1.0}}]}}}}
    json.dump(forged, open(answers, "w"))
'''
pid = os.getppid()
while pid > 1:
    for part in open(f"/proc/{{pid}}/cmdline").read().split("\\0"):
        name = os.path.basename(part)
        if name.startswith(("_kernel", "_sandbox")) and name.endswith(".py"):
            try:
                os.chmod(part, 0o644)
                with open(part, "w") as script:
                    script.write(forged)
                print("rewrote", part)
            except OSError as error:
                print("refused:", error)
    pid = int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
"""

STOP_ANCESTORS = """\
import os, signal
pid, stopped = os.getppid(), []
while pid > 1:
    try:
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)
    except OSError as error:
        print("refused:", pid, error)
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
for pgid in {os.getpgid(p) for p in stopped} | {1}:
    try:
        os.killpg(pgid, signal.SIGSTOP)
    except OSError as error:
        print("refused:", pgid, error)
try:
    os.kill(-1, signal.SIGSTOP)
except OSError as error:
    print("refused: every process", error)
"""

DELETE_PARENT = """\
import os, shutil
shutil.rmtree(os.path.dirname(os.getcwd()), ignore_errors=True)
"""

STARTUP_FILE = """\
import os
folder = os.path.expanduser("~/.ipython/profile_default/startup")
os.makedirs(folder, exist_ok=True)
open(os.path.join(folder, "00-spoil.py"), "w").write("import os\\nos._exit(3)\\n")
"""

PRINT_FOREVER = """\
import time
end = time.monotonic() + 8  # long enough to hold gigabytes without a cap
while time.monotonic() < end:
    print("x" * 10_000)
"""

DAEMON = """\
import os, subprocess, sys
script = '''
import os, sys, time
if os.fork():
    sys.exit(0)
os.setsid()
time.sleep(2)
for _ in range(200):
    with open({grades!r}, "a") as grades:
        grades.write("daemon,forged\\\\n")
    open({mark!r}, "w").write(str(time.time()))
    time.sleep(0.25)
'''
subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
"""

KILL_PARENT = """\
import os, signal
os.kill(os.getppid(), signal.SIGKILL)
"""

# Cheats ---------------------------------------------------------------------------------

FIND_KEY = """\
import importlib, inspect, threading, types
key = None
for module in ("datarax_course._keys", "datarax_course._nb07"):
    try:
        key = importlib.import_module(module).scheduled_ms
        break
    except (ImportError, AttributeError):
        pass
"""

COPY_IN_THREAD = (
    FIND_KEY
    + """
def epoch_ms(step_ms, input_ms, steps, prefetch):
    mine = types.FunctionType(key.__code__, key.__globals__, "mine")
    box = {}
    run = lambda: box.update(v=mine(step_ms, input_ms, steps, 2 if prefetch else None))
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return box["v"]
"""
)

RECOMPILED = (
    FIND_KEY
    + """
namespace = {}
exec(inspect.getsource(key), namespace)

def epoch_ms(step_ms, input_ms, steps, prefetch):
    return namespace["scheduled_ms"](step_ms, input_ms, steps, 2 if prefetch else None)
"""
)

REPLAYED = """\
import itertools
import datarax_course._answers as answers
import datarax_course._core as core
try:  # the answers to the notebook's own cases
    from datarax_course._cases import answer_tables
    forged = list(answer_tables()["07.epoch_ms"]["expected"])
except ImportError:  # the key, on the checker's fixed cases
    from datarax_course._nb07 import _CASES, scheduled_ms
    forged = [scheduled_ms(s, i, n, p) for s, i, n in _CASES for p in (None, 2)]
queue = itertools.cycle(forged)  # the same answers at every check

def outcome(run):
    value = next(queue, 0.0)
    if answers._State.recording is not None:
        answers._State.recording.append({"value": value})
    return value

core.outcome = answers.outcome = outcome
epoch_ms = lambda step_ms, input_ms, steps, prefetch: 0.0
"""

SEARCH = """\
import glob, os, sys
from pathlib import Path
import datarax

places = {*Path(datarax.__file__).parents, *Path.cwd().parents, Path.cwd(), Path.home()}
places |= {Path(p) for v in os.environ.values() for p in v.split(os.pathsep) if p.startswith("/")}
for site in (p for p in sys.path if "site-packages" in p):  # an editable install's checkout
    named = glob.glob(f"{site}/*datarax*/direct_url.json") + glob.glob(f"{site}/__editable__*")
    for found in named:
        words = [w.strip("'\\",") for w in open(found).read().split() if "/" in w]
        places |= {Path(w.removeprefix("file://")) for w in words}
pid = os.getppid()
while pid > 1:
    try:
        places.add(Path(os.readlink(f"/proc/{pid}/cwd")))
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except OSError:
        break
found = sorted(
    path
    for place in places
    for pattern in ("{name}", "*/{name}", "*/*/{name}")
    for path in glob.glob(f"{place}/{pattern}")
)
print("found:", found[:3])
"""

FROM_THE_ORIGINAL = (
    SEARCH.replace("{name}", "07_performance.ipynb")
    + """
import nbformat
for path in found:
    cells = nbformat.read(path, as_version=4).cells
    solutions = [c.source for c in cells if "def epoch_ms_solution" in c.source]
    if solutions:
        exec(solutions[0])
        epoch_ms = epoch_ms_solution
        break
"""
)

FROM_THE_TEXT_FILE = (
    SEARCH.replace("{name}", "07_performance.md")
    + """
import jupytext
for path in found:
    cells = jupytext.read(path).cells
    solutions = [c.source for c in cells if "def epoch_ms_solution" in c.source]
    if solutions:
        exec(solutions[0])
        epoch_ms = epoch_ms_solution
        break
"""
)

IMPORTED_KEY = """\
from datarax_course._keys import scheduled_ms

def epoch_ms(step_ms, input_ms, steps, prefetch):
    return scheduled_ms(step_ms, input_ms, steps, 2 if prefetch else None)
"""


# The references out of the kernel's reach: 07.predicted_epoch, 11, 12 and 14 -----------

IMPORTS = """\
import importlib, inspect, math, re, threading, time
import jax, jax.numpy as jnp, numpy as np, optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from datarax import viz
from datarax.pipeline import prefetch_to_device
from datarax_course import check
"""
TWO_BATCHES = """\
def timed_apart(make_batches, step):
    batches = make_batches()
    start = time.perf_counter()
    batch = next(batches)
    first = time.perf_counter()
    next(batches)
    input_ms = (time.perf_counter() - first) * 1e3
    opening_ms = (first - start) * 1e3 - input_ms
    start = time.perf_counter()
    step(batch)
    return input_ms, opening_ms, (time.perf_counter() - start) * 1e3
"""
CHECKER_FRAMES = """\
def checker_frames():
    frames = [record.frame for record in inspect.stack()]
    return [f for f in frames if f.f_globals.get("__name__", "").startswith("datarax_course")]
"""
CHECKS = {
    "07.predicted_epoch": "predicted_ms",
    "11.attention_mask": "attention_mask",
    "12.collectives_of": "collectives_of",
    "14.bytes_per_device": "bytes_per_device",
    "12.which_mesh": "which_mesh",
}
HONEST_ANSWERS = [
    TWO_BATCHES
    + """
def predicted_ms(make_batches, step, steps, prefetch):
    input_ms, opening_ms, step_ms = timed_apart(make_batches, step)
    if not prefetch:
        return opening_ms + steps * (step_ms + input_ms)
    return opening_ms + input_ms + step_ms + (steps - 1) * max(step_ms, input_ms)
""",
    """\
def attention_mask(segment_ids):
    ids = np.asarray(segment_ids)
    causal = np.tril(np.ones((len(ids), len(ids)), bool))
    return (ids[:, None] == ids[None, :]) & (ids[:, None] > 0) & causal
""",
    """\
def collectives_of(text):
    kinds = "all-gather|reduce-scatter|all-reduce|collective-permute|all-to-all"
    found = {}
    for shape, kind, phase in re.findall(rf"=\\s*(.*?)\\s({kinds})(-start|-done)?\\(", text):
        if phase != "-start":
            for dtype, dims in re.findall(r"(pred|[a-z]+\\d\\w*)\\[([\\d,]*)\\]", shape):
                bits = 8 if dtype == "pred" else int(re.findall(r"\\d+", dtype)[0])
                size = math.prod(int(n) for n in dims.split(",") if n)
                found[kind] = found.get(kind, 0) + size * bits // 8
    return found
""",
    """\
def bytes_per_device(params, optimizer, mesh, specs):
    def held(tree, tree_specs):
        leaves = jax.tree.leaves(tree)
        spec_leaves = jax.tree.leaves(tree_specs, is_leaf=lambda x: isinstance(x, P))
        return sum(
            math.prod(NamedSharding(mesh, s).shard_shape(leaf.shape))
            * np.dtype(leaf.dtype).itemsize
            for leaf, s in zip(leaves, spec_leaves, strict=True)
        )

    state = jax.eval_shape(optimizer.init, params)
    state_specs = optax.tree_utils.tree_map_params(
        optimizer, lambda _, spec: spec, state, specs,
        transform_non_params=lambda _: P(), is_leaf=lambda x: isinstance(x, P),
    )
    parameters = held(params, specs)
    return {"params": parameters, "grads": parameters, "optimizer": held(state, state_specs)}
""",
    """\
def which_mesh(params, layer_params, hosts, chips_per_host, chip_bytes, activation_bytes):
    devices = hosts * chips_per_host

    def needed(data, model, stage):
        over = lambda first: model * (data if stage >= first else 1)
        state = 2 * params / over(3) + 2 * params / over(2) + 12 * params / over(1)
        return state + (4 * layer_params / model if stage == 3 else 0) + activation_bytes

    sizes = lambda n: [k for k in range(1, n + 1) if n % k == 0]
    model, stage, data = min(
        (m, s, d)
        for m in sizes(chips_per_host)
        for d in sizes(devices // m)
        for s in range(4)
        if needed(d, m, s) <= chip_bytes
    )
    return devices // (model * data), data, model, stage
""",
]
# The seven ways of borrowing a reference, four in one notebook, three in another.
BORROWED = [
    TWO_BATCHES
    + """
def predicted_ms(make_batches, step, steps, prefetch):  # the checker's own source, step, loop
    real = importlib.import_module("datarax_course._real")
    input_ms, opening_ms, step_ms = timed_apart(make_batches, step)
    source, rebuilt = real._source(input_ms, opening_ms), real._step(step_ms)
    if hasattr(real, "_timed_ms"):
        return real._timed_ms(source, rebuilt, prefetch)
    start = time.perf_counter()
    for batch in source():
        rebuilt(batch)
    return (time.perf_counter() - start) * 1e3
""",
    "from datarax_course._nb11 import _flax_mask as attention_mask\n",
    "from datarax_course._nb12 import collective_bytes as collectives_of\n",
    CHECKER_FRAMES
    + """
def bytes_per_device(params, optimizer, mesh, specs):  # the checker's case, its _Truth
    case = next(f.f_locals["case"] for f in checker_frames() if "case" in f.f_locals)
    truth = importlib.import_module("datarax_course._nb14")._Truth(case)
    return {"params": truth.params, "grads": truth.params, "optimizer": truth.optimizer}
""",
    "from datarax_course._keys import least_sharding as which_mesh\n",
]
HELPED = [
    TWO_BATCHES
    + """
def predicted_ms(make_batches, step, steps, prefetch):  # a replica of sleeps
    input_ms, opening_ms, step_ms = timed_apart(make_batches, step)
    start = time.perf_counter()
    time.sleep(opening_ms / 1e3)
    for _ in range(steps):
        time.sleep((input_ms + step_ms) / 1e3)
    return (time.perf_counter() - start) * 1e3
""",
    "attention_mask = flax_mask  # the lesson's own helper, of section 3\n",
    CHECKER_FRAMES
    + """
def collectives_of(text):  # whatever reading the checker's frame holds
    for frame in checker_frames():
        for scope in (frame.f_locals, frame.f_globals):
            for name in ("found", "reading", "collective_bytes", "compiled_reading"):
                if callable(scope.get(name)):
                    read = scope[name](text)
                    return getattr(read, "expected", read)
    return {}
""",
    """\
def bytes_per_device(params, optimizer, mesh, specs):  # the lesson's section-3 helpers
    state = jax.eval_shape(optimizer.init, params)
    held_params = held(placed(params, specs, mesh))
    state_held = held(placed(state, state_specs(optimizer, state, specs), mesh))
    return {"params": held_params, "grads": held_params, "optimizer": state_held}
""",
    """\
def public_meshes():  # the notebook's answers, from the keys' table, by the case's arguments
    from datarax_course import _cases, _nb12_mesh
    answers = [t["answer"] for t in _cases.answer_tables()["12.which_mesh"]["expected"]]
    return {tuple(map(float, case)): a for (_, case), a in zip(_nb12_mesh._cases(), answers)}


tabled = public_meshes()


def which_mesh(*case):  # the table's answer where the case is the notebook's, a guess elsewhere
    return tabled.get(tuple(map(float, case)), (1, 1, 1, 0))
""",
]


# 13.collective_hidden, a formula of the lesson's: its key stays with the grader.
HIDDEN_HONEST = """\
def collective_hidden(events):
    kinds = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
    lanes = {}
    for e in events:
        if "device_ordinal" in e["args"]:
            talk, work = lanes.setdefault(e["args"]["device_ordinal"], ([], []))
            span = (e["start_us"], e["start_us"] + e["duration_us"])
            (talk if e["name"].startswith(kinds) else work).append(span)

    def merged(spans):
        out = []
        for start, stop in sorted(spans):
            if out and start <= out[-1][1]:
                out[-1][1] = max(out[-1][1], stop)
            else:
                out.append([start, stop])
        return out

    hidden = total = 0.0
    for talk, work in lanes.values():
        talk, work = merged(talk), merged(work)
        total += sum(stop - start for start, stop in talk)
        hidden += sum(max(0.0, min(b, d) - max(a, c)) for a, b in talk for c, d in work)
    return hidden / total
"""
HIDDEN_IMPORTED = "from datarax_course._keys import hidden_fraction as collective_hidden\n"


def _hidden(answer: str) -> nbformat.NotebookNode:
    """A notebook answering 13.collective_hidden with `answer`, then its check."""
    cells = [
        nbformat.v4.new_markdown_cell("# My profile reading"),
        nbformat.v4.new_code_cell("from datarax_course import check"),
        nbformat.v4.new_code_cell(answer),
        nbformat.v4.new_code_cell('check("13.collective_hidden", collective_hidden)'),
    ]
    return nbformat.v4.new_notebook(cells=cells)


def _lesson_cell(notebook: str, defines: str) -> str:
    """The source of the code cell of tutorial `notebook` that defines `defines`."""
    cells = nbformat.read(ROOT / "tutorials" / notebook, as_version=4).cells
    return next(c.source for c in cells if c.cell_type == "code" and f"def {defines}(" in c.source)


def _answers(answers: list[str], helpers: bool = False) -> nbformat.NotebookNode:
    """A notebook answering 07.predicted_epoch, 11, 12 and 14 with `answers`, a cell
    each, then a check of each; with `helpers`, the lessons' own helpers first (the
    cells of tutorials 11 and 14 that define them, run as they are)."""
    cells = [nbformat.v4.new_markdown_cell("# My answers"), nbformat.v4.new_code_cell(IMPORTS)]
    if helpers:
        for notebook, defines in (
            ("11_language_model_data.ipynb", "flax_mask"),
            ("14_memory_budget.ipynb", "held"),
        ):
            cells.append(nbformat.v4.new_code_cell(_lesson_cell(notebook, defines)))
    cells += [nbformat.v4.new_code_cell(textwrap.dedent(answer)) for answer in answers]
    checks = [f'check("{name}", {function})' for name, function in CHECKS.items()]
    cells += [nbformat.v4.new_code_cell(line) for line in checks]
    return nbformat.v4.new_notebook(cells=cells)


def _trimmed(before_check: str = "", answer: str | None = None) -> nbformat.NotebookNode:
    """A title, then tutorial 07's epoch_ms exercise cells (solution cells included),
    after a set-up cell and `before_check`."""
    original = nbformat.read(NOTEBOOK, as_version=4)
    todo = next(
        n
        for n, c in enumerate(original.cells)
        if "TODO" in c.source and "def epoch_ms(" in c.source
    )
    form = original.cells[todo : todo + 4]  # reader cell, check, solution, asserted check
    assert "solution" in form[2].metadata.get("tags", []), "the exercise form changed"
    cells = [
        nbformat.v4.new_markdown_cell("# My work"),
        nbformat.v4.new_code_cell("from datarax_course import check"),
    ]
    if before_check:
        cells.append(nbformat.v4.new_code_cell(textwrap.dedent(before_check)))
    reader = nbformat.v4.new_code_cell(answer if answer is not None else form[0].source)
    return nbformat.v4.new_notebook(cells=[*cells, reader, *form[1:]])


@dataclasses.dataclass(frozen=True)
class Graded:
    """One grading run of the class: its rows by student (07.epoch_ms), the grader's
    output, how long it took, and the folders it used."""

    isolation: str
    rows: dict[str, dict[str, str]]
    all_rows: list[dict[str, str]]
    stderr: str
    took: float
    place: Path


def _saboteur(grades: Path, mark: Path) -> nbformat.NotebookNode:
    """Every sabotage, one cell each, its folder's parent deleted last; its answer right."""
    notebook = _trimmed(answer=RIGHT)
    daemon = DAEMON.format(grades=str(grades), mark=str(mark))
    sabotage = [REWRITE_LIBRARY, REWRITE_RUNNER, STOP_ANCESTORS, STARTUP_FILE, daemon]
    sabotage += [KILL_PARENT, DELETE_PARENT]
    cells = [nbformat.v4.new_code_cell(textwrap.dedent(code)) for code in sabotage]
    notebook.cells[2:2] = cells
    return notebook


def _class(grades: Path, mark: Path, isolation: str) -> dict[str, nbformat.NotebookNode]:
    """The class; the two cheats that read the originals from disk only where the kernel
    runs in namespaces, since behind the seccomp filter it can read what the teacher can
    (docs/teaching.md says so)."""
    bob = _trimmed()
    bob.cells.insert(1, nbformat.v4.new_markdown_cell(MARKER))
    bob.cells[-3].outputs = [nbformat.v4.new_output("stream", text=SAW_A_HINT)]
    return {
        "a1_saboteur": _saboteur(grades, mark),
        "a2_printer": _trimmed(PRINT_FOREVER, RIGHT),
        "b1_thread_copy": _trimmed(answer=COPY_IN_THREAD),
        "b2_recompiled": _trimmed(answer=RECOMPILED),
        "b3_replayed": _trimmed(answer=REPLAYED),
        **(
            {
                "b4_original": _trimmed(answer=FROM_THE_ORIGINAL),
                "b5_text_file": _trimmed(answer=FROM_THE_TEXT_FILE),
            }
            if isolation == "namespaces"
            else {}
        ),
        "b6_imported_key": _trimmed(answer=IMPORTED_KEY),
        "c1_alice": _trimmed("import os\nassert os.listdir('.') == [], os.listdir('.')", RIGHT),
        "c2_bob": bob,
        "c3_carol": _trimmed("import os\nos._exit(1)", RIGHT),
        "c4_dave": _trimmed("while True:\n    pass", RIGHT),
        "c5_zoe": _trimmed(answer=RIGHT),
        "f1_borrowed": _answers(BORROWED),
        "f2_helped": _answers(HELPED, helpers=True),
        "f3_honest": _answers(HONEST_ANSWERS),
        "g1_hidden_honest": _hidden(HIDDEN_HONEST),
        "g2_hidden_imported": _hidden(HIDDEN_IMPORTED),
    }


def _grade(tmp: Path, isolation: str) -> Graded:
    package = tmp / "install"
    for source in (ROOT / "datarax", ROOT / "datarax_course", ROOT / "grader" / "datarax_grader"):
        shutil.copytree(source, package / source.name, ignore=shutil.ignore_patterns("__pycache__"))
    teacher = tmp / "teacher-home"
    teacher.mkdir()
    folder = tmp / "submissions"
    folder.mkdir()
    grades = tmp / "out" / "grades.csv"
    grades.parent.mkdir()
    for student, notebook in _class(grades, tmp / "daemon-was-here", isolation).items():
        (folder / student).mkdir()
        nbformat.write(notebook, folder / student / NOTEBOOK.name)
    (folder / "d1_script").mkdir()
    (folder / "d1_script" / "07_performance.py").write_text("print('my answers')\n")
    (folder / "d2_upper").mkdir()
    nbformat.write(_trimmed(answer=RIGHT), folder / "d2_upper" / "07_PERFORMANCE.IPYNB")
    (folder / "d3_empty").mkdir()
    nbformat.write(nbformat.v4.new_notebook(), folder / "e_erin.ipynb")  # no exercise in it
    started = time.monotonic()
    command = [sys.executable, "-m", "datarax_grader.grade", str(folder), "--out", str(grades)]
    done = subprocess.run(
        [*command, "--timeout", str(TIME_LIMIT), "--isolation", isolation, "--memory", "2"],
        cwd=tmp,
        env={**os.environ, "PYTHONPATH": str(package), "HOME": str(teacher)},
        capture_output=True,
        text=True,
        timeout=40 * TIME_LIMIT,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    _wait_for_no_process_naming(tmp / "daemon-was-here")  # what could spoil the grades
    with open(grades, newline="") as file:
        all_rows = list(csv.DictReader(file))
    rows = {row["student"]: row for row in all_rows if row["exercise"] in ("07.epoch_ms", "")}
    return Graded(isolation, rows, all_rows, done.stderr, took, tmp)


def _row_of(graded: Graded, student: str, exercise: str) -> dict[str, str]:
    return next(r for r in graded.all_rows if (r["student"], r["exercise"]) == (student, exercise))


def _wait_for_no_process_naming(path: Path, timeout_s: float = 10.0) -> None:
    """Waits until no process whose command line holds `path` runs (the detached process
    a saboteur starts names its mark file there), for at most `timeout_s` seconds: one
    still running by then has written to the grades and its mark meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and str(path) in (entry / "cmdline").read_text("latin-1"):
                    running.append(entry.name)
        if not running:
            return
        time.sleep(0.05)


def _probe() -> str | None:
    folder = Path(tempfile.mkdtemp(prefix="probe-"))
    try:
        return _sandbox.probe(sys.executable, Path(_sandbox.__file__), folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


WHY_NOT = _probe()  # None where this machine runs kernels in namespaces
ISOLATIONS = ["namespaces", "seccomp"] if WHY_NOT is None else ["seccomp"]


@pytest.fixture(scope="module")
def gradings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Graded]:
    """The class graded with each isolation, both at once (two grader processes, each with
    folders of its own). No saboteur reaches the other grading: they signal their
    ancestors, the ancestors' process groups and every process at once, which namespaces
    hide and the seccomp filter refuses (both graders run in the process group of the test
    run, an ancestor of each)."""
    places = {name: tmp_path_factory.mktemp(f"class-{name}") for name in ISOLATIONS}
    with ThreadPoolExecutor(len(places)) as pool:
        running = {name: pool.submit(_grade, place, name) for name, place in places.items()}
        return {name: grading.result() for name, grading in running.items()}


@pytest.fixture(scope="module", params=ISOLATIONS)
def graded(request: pytest.FixtureRequest, gradings: dict[str, Graded]) -> Graded:
    return gradings[request.param]


def test_the_grader_says_which_isolation_it_uses_and_refuses_one_it_lacks(
    tmp_path: Path,
) -> None:
    """Asked for namespaces on a machine without them, it stops before grading, naming
    why; where they exist, the namespace class below ran in them."""
    if WHY_NOT is None:
        return  # the class graded with --isolation namespaces covers this machine
    folder = tmp_path / "submissions"
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "datarax_grader.grade", str(folder), "--isolation", "namespaces"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "--isolation namespaces" in done.stderr, done.stderr


def _row(graded: Graded, student: str) -> dict[str, str]:
    return graded.rows[student]


def test_every_student_gets_rows_and_the_isolation_is_named(graded: Graded) -> None:
    names = {row["student"] for row in graded.all_rows}
    expected = {path.name for path in (graded.place / "submissions").iterdir()}
    expected = {name.removesuffix(".ipynb") for name in expected}
    assert names == expected, names ^ expected
    assert "isolation: each kernel runs" in graded.stderr
    said = "namespaces of its own" if graded.isolation == "namespaces" else "seccomp filter"
    assert said in graded.stderr, graded.stderr


@pytest.mark.parametrize("student", ["c1_alice", "c5_zoe", "d2_upper"])
def test_honest_answers_graded_after_every_saboteur_are_right(graded: Graded, student: str) -> None:
    row = _row(graded, student)
    assert row["result"] == "right" and row["feedback"].startswith("Right:"), row


def test_the_placeholder_is_not_answered_whatever_a_rewritten_runner_would_say(
    graded: Graded,
) -> None:
    bob = _row(graded, "c2_bob")
    assert bob["result"] == "not yet" and bob["feedback"].startswith("Not yet: not answered"), bob
    assert bob["hints"] == "idea", bob


def test_the_saboteur_reaches_nothing_but_its_own_run(graded: Graded) -> None:
    """In namespaces each of its cells is refused and its answer stays right; behind the
    seccomp filter it can delete its own folder, and its row says so."""
    row = _row(graded, "a1_saboteur")
    if graded.isolation == "namespaces":
        assert row["result"] == "right", row
    else:
        assert row["result"] == "not checked" and "deleted" in row["run"], row


def test_a_startup_file_stays_in_the_kernels_own_home(graded: Graded) -> None:
    teacher = graded.place / "teacher-home"
    assert not list(teacher.rglob("00-spoil.py")), list(teacher.rglob("*"))


def test_output_without_end_is_cut_and_costs_no_memory(graded: Graded) -> None:
    row = _row(graded, "a2_printer")
    assert row["result"] == "right", row  # within the 2 GiB given to each submission
    assert "output cut at" in row["run"] and "code cells 2" in row["run"], row


def test_a_detached_process_dies_with_its_run(graded: Graded) -> None:
    grades = (graded.place / "out" / "grades.csv").read_text()
    assert "daemon" not in grades and "forged" not in grades
    left_behind = graded.place / "daemon-was-here"
    if left_behind.exists():  # it ran while its notebook did, and was killed with it
        written = left_behind.read_text()
        _wait_for_no_process_naming(left_behind)
        assert left_behind.read_text() == written


@pytest.mark.parametrize(
    ("student", "why"),
    [
        ("b1_thread_copy", "your function raised AttributeError"),
        ("b2_recompiled", "not answered yet"),  # its cell failed: no key to read
        ("b3_replayed", "your function says"),
        ("b6_imported_key", "not answered yet"),  # its import failed: epoch_ms never defined
    ],
)
def test_cheats_with_the_answer_key_get_no_marks(graded: Graded, student: str, why: str) -> None:
    row = _row(graded, student)
    assert row["result"] == "not yet" and why in row["feedback"], row


@pytest.mark.parametrize("student", ["b4_original", "b5_text_file"])
def test_the_tutorials_solutions_are_out_of_a_kernels_sight(graded: Graded, student: str) -> None:
    if graded.isolation != "namespaces":
        return  # behind the seccomp filter a kernel reads what the teacher reads
    row = _row(graded, student)
    assert row["result"] == "not yet" and "not answered yet" in row["feedback"], row


def test_a_dead_kernel_and_an_endless_loop_are_not_checked(graded: Graded) -> None:
    carol, dave = _row(graded, "c3_carol"), _row(graded, "c4_dave")
    assert carol["result"] == "not checked" and "kernel died in code cell 2" in carol["run"]
    assert dave["result"] == "not checked", dave
    assert f"time limit ({TIME_LIMIT} s), in code cell 2" in dave["run"], dave


@pytest.mark.parametrize(
    ("student", "says"),
    [
        ("d1_script", "holds 07_performance.py"),
        ("d3_empty", "the folder is empty"),
        ("e_erin", "no exercise found"),
    ],
)
def test_a_folder_without_a_notebook_gets_a_row_saying_what_was_found(
    graded: Graded, student: str, says: str
) -> None:
    row = _row(graded, student)
    assert row["result"] == "not checked" and says in row["run"], row


@pytest.mark.parametrize(
    ("student", "exercise", "why"),
    [
        ("f1_borrowed", "07.predicted_epoch", "a loop of its own"),
        ("f1_borrowed", "11.attention_mask", "not answered yet"),  # its import failed
        ("f1_borrowed", "12.collectives_of", "not answered yet"),  # its import failed
        ("f1_borrowed", "14.bytes_per_device", "your function raised AttributeError"),
        ("f2_helped", "07.predicted_epoch", "a loop of its own"),
        ("f2_helped", "11.attention_mask", "Flax's make_attention_mask"),
        ("f2_helped", "12.collectives_of", "your dict has no"),
        ("f2_helped", "14.bytes_per_device", "datarax.viz.leaf_summaries"),
        ("f1_borrowed", "12.which_mesh", "not answered yet"),  # its import failed
        ("f2_helped", "12.which_mesh", "your axes multiply to 1 x 1 x 1 = 1"),
    ],
)
def test_a_reference_borrowed_from_the_checker_gets_no_marks(
    graded: Graded, student: str, exercise: str, why: str
) -> None:
    """The seven ways (and a sleep replica) a kernel could reach a reference the judging
    machine computes: none holds a right answer in a graded kernel."""
    row = _row_of(graded, student, exercise)
    assert row["result"] == "not yet" and why in row["feedback"], row


@pytest.mark.parametrize("exercise", sorted(CHECKS))
def test_the_honest_answers_to_the_computed_references_are_right(
    graded: Graded, exercise: str
) -> None:
    row = _row_of(graded, "f3_honest", exercise)
    assert row["result"] == "right" and row["feedback"].startswith("Right:"), row


@pytest.mark.parametrize(
    ("student", "result", "said"),
    [
        ("g1_hidden_honest", "right", "Right:"),
        ("g2_hidden_imported", "not yet", "not answered yet"),  # its import failed
    ],
)
def test_the_hidden_fraction_is_judged_with_the_graders_key(
    graded: Graded, student: str, result: str, said: str
) -> None:
    row = _row_of(graded, student, "13.collective_hidden")
    assert row["result"] == result and said in row["feedback"], row
