# Every target creates .venv from nothing when it is missing (needs only python3 and pip).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS ?= tests,tutorials,docs,dev,browser
# Every process started from here, JupyterLab kernels included, sees 8 simulated CPU devices.
export XLA_FLAGS := --xla_force_host_platform_device_count=8
export JAX_PLATFORMS ?= cpu

# A notebook takes 5-15 s here; a cell that hangs fails after 120 s (nbmake waits 300 s).
NBMAKE := --nbmake --nbmake-timeout=120

COLAB_VENV ?= .venv-colab
COLAB_PINS := jax==0.7.2 jaxlib==0.7.2 flax==0.11.2

.PHONY: venv test unit tutorials lint lab colab-unit clean bench docs colab binder-check browser-check

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

venv: $(STAMP)

## make test: lint, type check, unit and multi-process tests, doctests and every notebook.
test: lint
	$(PY) -m pytest tests datarax tutorials $(NBMAKE)

## make unit: the unit tests and doctests only.
unit: $(STAMP)
	$(PY) -m pytest tests datarax

## make tutorials: execute every notebook headless.
tutorials: $(STAMP)
	$(PY) -m pytest $(NBMAKE) tutorials

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pyright

## make bench: side-by-side benchmarks; writes docs/benchmarks/results.json and PNGs.
bench: $(STAMP)
	$(PY) -m benchmarks --out docs/benchmarks

## make lab: JupyterLab on tutorials/.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=tutorials --allow-root $(LAB_ARGS)

## make colab-unit: the unit tests on what Colab's TPU runtime ships, in $(COLAB_VENV).
$(COLAB_VENV)/.installed: pyproject.toml
	test -x $(COLAB_VENV)/bin/python || $(PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(COLAB_VENV)/bin/python -m pip install --quiet -e ".[tests,tutorials]" $(COLAB_PINS)
	touch $@

colab-unit: $(COLAB_VENV)/.installed
	$(COLAB_VENV)/bin/python -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__)"
	$(COLAB_VENV)/bin/python -m pytest tests datarax -p no:cacheprovider

## make colab: the tests and every notebook on Colab's TPU runtime versions, Python 3.11.
colab: $(COLAB_VENV)/.installed
	$(COLAB_VENV)/bin/python -c "import sys, jax, jaxlib, flax; \
	found = (sys.version_info[:2], jax.__version__, jaxlib.__version__, flax.__version__); \
	print('python %d.%d, jax %s, jaxlib %s, flax %s' % (*found[0], *found[1:])); \
	assert found == ((3, 11), '0.7.2', '0.7.2', '0.11.2'), found"
	$(COLAB_VENV)/bin/python -m pytest tests datarax tutorials $(NBMAKE) -p no:cacheprovider

## make docs: the site in docs/_build/html; every tutorial executed (cached), warnings are errors.
docs: $(STAMP)
	$(PY) -m pytest --doctest-modules docs/_tools -q -p no:cacheprovider
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html
	$(PY) docs/_tools/check_site.py docs/_build/html tutorials

## make binder-check: a fresh venv from binder/requirements.txt; notebooks run via binder/start.
binder-check:
	.ci/binder_check.sh

## make browser-check: tutorial 1 in JupyterLab, run in headless Chromium (/usr/bin/chromium).
browser-check: $(STAMP)
	timeout 600 $(PY) tests/browser/check_lab.py --timeout 420

clean:
	rm -rf $(VENV) $(COLAB_VENV) .venv-binder docs/_build docs/_generated .pytest_cache .ruff_cache .hypothesis
