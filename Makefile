# Every target creates .venv from nothing when it is missing (needs only python3 and pip).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS ?= tests,tutorials,docs,dev,browser
# Every process started from here, JupyterLab kernels included, sees 8 simulated CPU devices.
export XLA_FLAGS := --xla_force_host_platform_device_count=8
export JAX_PLATFORMS ?= cpu

# A notebook takes 6-27 s here; a cell that hangs fails after 120 s (nbmake waits 300 s).
# Two notebooks run at a time (pytest-xdist): most of a notebook's time is starting its
# kernel and JAX, or its local clusters' processes, which leave the other core idle.
NB_WORKERS ?= 2
NOTEBOOKS := --nbmake --nbmake-timeout=120
NBMAKE := $(NOTEBOOKS) -n $(NB_WORKERS)
# The unit and multi-process tests also run two at a time, a test file per worker (a
# file's module-scoped cluster starts once): 210 s instead of about 600 s one after another.
UNIT_WORKERS ?= 2
UNIT := -n $(UNIT_WORKERS) --dist loadfile
# Markers (pyproject.toml): the stress tests run once per CI run, in make stress; every other
# stage that runs the tests again leaves them out. make quick leaves out all three kinds.
NOT_STRESS := -m "not stress"
# make quick also skips loading nbmake (4 s a process) and lets Python cache the compiled
# tests and package (PYTHONDONTWRITEBYTECODE set empty; __pycache__ is git-ignored).
QUICK := -m "not multihost and not stress and not notebooks" -p no:nbmake

COLAB_VENV ?= .venv-colab
COLAB_PINS := jax==0.7.2 jaxlib==0.7.2 flax==0.11.2

# On Python 3.11, ml_dtypes 0.7.0 (which jax imports) takes 0.6 s to load, 0.6.0 takes 0.1 s
# (on Python 3.13, 0.7.0 takes 0.15 s): every host of a test's cluster, every worker and
# every kernel imports jax, and the library's tests took 236 CPU seconds instead of 309 with
# 0.6.0 (measured here). The venvs of make test and make colab keep ml_dtypes below 0.7 on
# Python 3.11; make newest, make package-check and Binder's venv install what pip resolves.
FAST_IMPORTS := "ml_dtypes<0.7; python_version < '3.12'"

NEWEST_VENV ?= .venv-newest
# The newest Python 3.12+ here that starts: python3.13 or python3.12 on the PATH (a pyenv
# shim of a version not selected does not start), else the newest one pyenv installed;
# else $(PYTHON). jax 0.11 and later need Python 3.12 or newer.
# Override with NEWEST_PYTHON=/path/to/python.
PYENV_PYTHONS := $(shell ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.*/bin/python3 \
	2>/dev/null | sort -V -r)
NEWEST_PYTHON ?= $(firstword $(foreach candidate,python3.13 python3.12 $(PYENV_PYTHONS),\
	$(shell $(candidate) -c 'import sys; sys.exit(sys.version_info < (3, 12))' \
	>/dev/null 2>&1 && echo $(candidate))) $(PYTHON))
export NEWEST_VERSIONS := import sys, jax, jaxlib, flax; \
	print('tested: python %d.%d.%d, jax %s, jaxlib %s, flax %s' \
	% (*sys.version_info[:3], jax.__version__, jaxlib.__version__, flax.__version__)); \
	sys.version_info < (3, 12) and print('NOTE: Python %d.%d is the newest Python found here, \
	so jax %s is the newest jax this machine can test (jax 0.11 and later need Python 3.12+).' \
	% (*sys.version_info[:2], jax.__version__))

# The device check runs on the machine's own python3: a GPU machine has no venv (or network).
PYTHON3 ?= python3
DEVICE_CHECK_OUT ?= docs/benchmarks

.PHONY: venv test stress quick unit tutorials lint lab colab-unit clean bench docs colab newest \
	newest-venv \
	device-check binder-check binder-venv browser-check student-notebooks package-check grade

# The library and course (this distribution), and the grader, a distribution of its own.
$(STAMP): pyproject.toml grader/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]" -e ./grader $(FAST_IMPORTS)
	touch $(STAMP)

venv: $(STAMP)

# The library's and the course's tests and doctests; the grader's run once, in make stress.
# make colab and make newest run the library's alone: the course's run once, in make test,
# as do the tests of the repository's files (layout, markers, the wheel's contents).
LIBRARY_TESTS := tests datarax datarax_course
REPOSITORY_TESTS := tests/test_layout.py tests/test_markers.py tests/test_package_check.py
CORE_TESTS := tests datarax --ignore=tests/course $(REPOSITORY_TESTS:%=--ignore=%)
GRADER_TESTS := grader/tests grader/datarax_grader

# make test runs copies of the notebooks in $(EXECUTED), written back with their outputs
# (nbmake --overwrite); make docs renders those whose cells are unchanged instead of
# running them again (docs/_tools/sources.py, copy_tutorials). Not under docs/_build:
# nbmake collects no notebook from a path with a _build folder in it.
EXECUTED := .executed

## make test: lint, type check, unit and multi-process tests, doctests and every notebook,
## in one pytest run (the notebooks fill the cores while the last test files end); the
## heaviest runs (stress) and the grader's tests are make stress, which CI runs once.
test: lint
	rm -rf $(EXECUTED) && mkdir -p $(EXECUTED) && cp tutorials/*.ipynb $(EXECUTED)/
	$(PY) -m pytest $(LIBRARY_TESTS) $(EXECUTED) $(UNIT) $(NOT_STRESS) $(NOTEBOOKS) --overwrite

## make stress: the stress tests (a scenario repeated under CPU load, the benchmarks' tiny
## runs, pods of 4,096 simulated devices) and the grader's tests, with a class of saboteurs.
stress: $(STAMP)
	$(PY) -m pytest $(LIBRARY_TESTS) $(UNIT) -m stress
	$(PY) -m pytest $(GRADER_TESTS) $(UNIT)

## make quick: the fast tests while you work: no local clusters (multihost), no runs under
## load (stress), no notebooks or kernels (notebooks); under 2 minutes on 2 cores.
quick: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest $(LIBRARY_TESTS) $(UNIT) $(QUICK)

## make unit: the unit tests and doctests only.
unit: $(STAMP)
	$(PY) -m pytest $(LIBRARY_TESTS) $(UNIT)

## make tutorials: execute every notebook headless.
tutorials: $(STAMP)
	$(PY) -m pytest $(NBMAKE) tutorials

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pyright

## make package-check: build the wheel and sdist as they would be published (twine check),
## install the wheel alone in a fresh venv and use it as a user would (every public module,
## the README's runnable code), then with the tutorials extra (tutorial 01); see
## .ci/package_check.py. pip's cache makes a second run quick.
package-check: $(STAMP)
	$(PY) .ci/package_check.py

## make bench: side-by-side benchmarks; writes docs/benchmarks/results.json and PNGs.
bench: $(STAMP)
	$(PY) -m benchmarks --out docs/benchmarks

## make lab: JupyterLab on tutorials/.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=tutorials --allow-root $(LAB_ARGS)

## make colab-unit: the unit tests (not stress) on what Colab's TPU runtime ships, in $(COLAB_VENV).
$(COLAB_VENV)/.installed: pyproject.toml
	test -x $(COLAB_VENV)/bin/python || $(PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(COLAB_VENV)/bin/python -m pip install --quiet -e ".[tests,tutorials]" $(COLAB_PINS) \
		$(FAST_IMPORTS)
	touch $@

colab-unit: $(COLAB_VENV)/.installed
	$(COLAB_VENV)/bin/python -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__)"
	$(COLAB_VENV)/bin/python -m pytest $(LIBRARY_TESTS) $(UNIT) $(NOT_STRESS) -p no:cacheprovider

## make colab: the library's tests (CORE_TESTS: the notebooks run the course's checks) and
## every notebook, in one pytest run, on Colab's TPU runtime versions, Python 3.11.
colab: $(COLAB_VENV)/.installed
	$(COLAB_VENV)/bin/python -c "import sys, jax, jaxlib, flax; \
	found = (sys.version_info[:2], jax.__version__, jaxlib.__version__, flax.__version__); \
	print('python %d.%d, jax %s, jaxlib %s, flax %s' % (*found[0], *found[1:])); \
	assert found == ((3, 11), '0.7.2', '0.7.2', '0.11.2'), found"
	$(COLAB_VENV)/bin/python -m pytest $(CORE_TESTS) tutorials $(UNIT) $(NOT_STRESS) $(NOTEBOOKS) \
		-p no:cacheprovider

## make newest-venv: $(NEWEST_VENV) on the newest Python here, with the newest jax and flax.
newest-venv:
	@python="$(NEWEST_PYTHON)"; \
	want=$$($$python -c 'import sys; print(sys.version)') || exit 1; \
	have=$$($(NEWEST_VENV)/bin/python -c 'import sys; print(sys.version)' 2>/dev/null); \
	if [ "$$want" != "$$have" ]; then \
		echo "$(NEWEST_VENV): a new venv on $$python (Python $${want%% *})"; \
		rm -rf $(NEWEST_VENV) && $$python -m venv $(NEWEST_VENV); \
	fi
	$(NEWEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(NEWEST_VENV)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager \
		-e ".[tests,tutorials]" jax jaxlib flax

## make newest: the library's tests (CORE_TESTS) and every notebook, in one pytest run,
## on the newest jax and flax pip resolves, in $(NEWEST_VENV) on the newest Python here;
## prints the versions it tested. NEWEST_INSTALL= skips the install (CI installs it early).
NEWEST_INSTALL ?= newest-venv
newest: $(NEWEST_INSTALL)
	@$(NEWEST_VENV)/bin/python -c "$$NEWEST_VERSIONS"
	$(NEWEST_VENV)/bin/python -m pytest $(CORE_TESTS) tutorials $(UNIT) $(NOT_STRESS) $(NOTEBOOKS) \
		-p no:cacheprovider || { $(NEWEST_VENV)/bin/python -c "$$NEWEST_VERSIONS"; exit 1; }
	@$(NEWEST_VENV)/bin/python -c "$$NEWEST_VERSIONS"

## make device-check: on $(PYTHON3), no venv: the unit tests, setup_devices(8), and shard
## against device_put and a pinned CuPy copy on one GPU (or what this machine has instead).
## Writes $(DEVICE_CHECK_OUT)/device.json and device.md.
device-check:
	PYTHONPATH=.$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON3) -m benchmarks.device_check \
		--out "$(DEVICE_CHECK_OUT)"

## make student-notebooks: copies of the notebooks for a class, in $(STUDENT_NOTEBOOKS): no
## cells tagged "solution", no quiz answers (<details> blocks), no Colab/Kaggle badges (they
## open the originals). Needs only nbconvert, in its own small venv $(STUDENT_VENV).
STUDENT_NOTEBOOKS ?= build/student-notebooks
STUDENT_VENV ?= .venv-students
STUDENT_PY ?= $(STUDENT_VENV)/bin/python
STUDENT_STAMP := $(STUDENT_VENV)/.installed

$(STUDENT_STAMP):
	test -x $(STUDENT_PY) || $(PYTHON) -m venv $(STUDENT_VENV)
	$(STUDENT_PY) -m pip install --quiet nbconvert nbformat
	touch $(STUDENT_STAMP)

student-notebooks: $(STUDENT_STAMP)
	$(STUDENT_PY) grader/datarax_grader/_students.py "$(STUDENT_NOTEBOOKS)" tutorials/[0-9][0-9]_*.ipynb

## make grade SUBMISSIONS=folder: runs every submitted notebook (solutions dropped) in its own
## kernel, isolated (namespaces where Linux allows them, else a seccomp filter: GRADE_ISOLATION),
## with a time limit and a memory limit in GiB, and writes one row per student and exercise to
## $(GRADES). docs/teaching.md says what each isolation protects.
SUBMISSIONS ?= submissions
GRADES ?= grades.csv
GRADE_TIMEOUT ?= 120
GRADE_MEMORY ?= 6
GRADE_ISOLATION ?= auto
grade: $(STAMP)
	$(PY) -m datarax_grader "$(SUBMISSIONS)" --out "$(GRADES)" --timeout $(GRADE_TIMEOUT) \
		--memory $(GRADE_MEMORY) --isolation $(GRADE_ISOLATION)

## make docs: the site in docs/_build/html; every tutorial executed (cached, or as make test ran
## it), warnings are errors.
docs: $(STAMP)
	$(PY) -m pytest --doctest-modules docs/_tools -q -p no:cacheprovider
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html
	$(PY) docs/_tools/check_site.py docs/_build/html tutorials

## make binder-check: a fresh venv from binder/requirements.txt; notebooks run via binder/start.
## BINDER_STEPS=run reuses the venv that make binder-venv installed (CI installs it early).
BINDER_STEPS ?= install run
binder-check:
	.ci/binder_check.sh $(BINDER_STEPS)

binder-venv:
	.ci/binder_check.sh install

## make browser-check: in JupyterLab in headless Chromium (/usr/bin/chromium), tutorial 1 runs,
## then the playground is driven through the page; both within 600 s.
browser-check: $(STAMP)
	timeout 600 sh -c '$(PY) tests/browser/check_lab.py --timeout 300 \
		&& $(PY) tests/browser/check_playground.py --timeout 200'

clean:
	rm -rf $(VENV) $(COLAB_VENV) $(NEWEST_VENV) .venv-binder $(EXECUTED) docs/_build docs/_generated .pytest_cache .ruff_cache .hypothesis
