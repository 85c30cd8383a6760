# Every target creates .venv from nothing when it is missing (needs only python3 and pip).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS ?= tests,tutorials,docs,dev
# Every process started from here, JupyterLab kernels included, sees 8 simulated CPU devices.
export XLA_FLAGS := --xla_force_host_platform_device_count=8
export JAX_PLATFORMS ?= cpu

COLAB_VENV ?= .venv-colab
COLAB_PINS := jax==0.7.2 jaxlib==0.7.2 flax==0.11.2

.PHONY: venv test unit tutorials lint lab colab-unit clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

venv: $(STAMP)

## make test: lint, type check, unit and multi-process tests, doctests and every notebook.
test: lint
	$(PY) -m pytest tests datarax tutorials --nbmake

## make unit: the unit tests and doctests only.
unit: $(STAMP)
	$(PY) -m pytest tests datarax

## make tutorials: execute every notebook headless.
tutorials: $(STAMP)
	$(PY) -m pytest --nbmake tutorials

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pyright

## make lab: JupyterLab on tutorials/.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=tutorials --allow-root $(LAB_ARGS)

## make colab-unit: the unit tests on what Colab's TPU runtime ships, in $(COLAB_VENV).
$(COLAB_VENV)/.installed: pyproject.toml
	test -x $(COLAB_VENV)/bin/python || $(PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(COLAB_VENV)/bin/python -m pip install --quiet -e ".[tests]" $(COLAB_PINS)
	touch $@

colab-unit: $(COLAB_VENV)/.installed
	$(COLAB_VENV)/bin/python -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__)"
	$(COLAB_VENV)/bin/python -m pytest tests datarax -p no:cacheprovider

clean:
	rm -rf $(VENV) $(COLAB_VENV) .pytest_cache .ruff_cache .hypothesis
