# `make demo` and `make test` set everything up on a fresh machine: they create .venv when it is
# missing and install vitlab (with torch pinned to the release these machines carry) into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.vitlab-installed
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1

.PHONY: install demo test test-fast clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -x

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
