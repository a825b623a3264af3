# `make demo` and `make test` set everything up on a fresh machine: they create .venv when it is
# missing and install vitlab (with torch pinned to the release these machines carry) into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.vitlab-installed
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
# The oldest torch pyproject.toml accepts: `make test-torch-floor` runs the fast tier on it.
TORCH_FLOOR_PINS ?= torch==2.9.1 torchvision==0.24.1

.PHONY: install demo docs test test-fast test-torch-floor wheel-demo lint hooks commits clean browser bench bench-avx2 bench-384 bench-int8 bench-pipelines bench-doc experiments-doc

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# Trains a small ViT on the built-in digits (about 1-2 minutes on 2 CPU cores), evaluates it,
# predicts a few digits saved as PNG, and prints where the model folder and the training curve are.
DEMO_DIR ?= runs/demo

demo: $(STAMP)
	$(PY) -m vitlab demo --out $(DEMO_DIR)

# The browser tests (the web demo, the analysis report) drive Debian's chromium through Playwright, which
# never downloads a browser of its own; installed here when missing, a no-op when it is there.
CHROMIUM ?= /usr/bin/chromium

browser:
	test -x $(CHROMIUM) || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

# The tests come in tiers (CONTRIBUTING.md). test-fast: the unit tests and the fault corpus's quick ones, the
# loop to run before each change. test: every test, on every core (pytest-xdist), after `make browser` when
# a browser test is among TESTS. Both take TESTS (paths or node ids) and PYTEST_ARGS.
TESTS ?= tests
WORKERS ?= auto
FAST ?= unit or (fault and integration)
BROWSER_TESTS := tests/serve/test_e2e.py tests/analysis/test_dataset.py

test: $(STAMP)
	@needed=no; for selected in $(TESTS); do selected=$${selected%%::*}; selected=$${selected%/}; \
		for browser in $(BROWSER_TESTS); do case $$browser in "$$selected"|"$$selected"/*) needed=yes;; esac; done; done; \
	if [ $$needed = yes ]; then $(MAKE) --no-print-directory browser || \
		echo "make test: chromium could not be installed; the browser tests say why they skip" >&2; fi
	$(PY) -m pytest -q -n $(WORKERS) --dist loadscope $(PYTEST_ARGS) $(TESTS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "$(FAST)" $(PYTEST_ARGS) $(TESTS)

# The fast tier on the oldest torch and torchvision that pyproject.toml accepts, in a venv of their own.
test-torch-floor:
	$(MAKE) test-fast VENV=.venv-torch-floor TORCH_PINS="$(TORCH_FLOOR_PINS)"

# The package as users get it: sdist and wheel built by `python -m build`, the wheel installed into a fresh
# venv, and `vitlab demo` run from it in an empty folder outside the source tree.
WHEEL_VENV ?= build/wheel-venv

wheel-demo: $(STAMP)
	rm -rf build/dist $(WHEEL_VENV)
	$(PY) -m build --outdir build/dist
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q $(TORCH_PINS) build/dist/vitlab-*.whl
	cd "$$(mktemp -d)" && $(abspath $(WHEEL_VENV))/bin/python -c "import vitlab; print(vitlab.__file__)" \
		| grep -q "$(abspath $(WHEEL_VENV))/lib/.*/site-packages/vitlab" && $(abspath $(WHEEL_VENV))/bin/vitlab demo --out demo

# The documentation site (mkdocs.yml): docs/ with the reference pages generated from the code at build
# time (docs/hooks/reference.py), built into build/site; --strict fails on a broken link or reference.
DOCS_STAMP := $(VENV)/.vitlab-docs-installed

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Static checks, configured in pyproject.toml ([tool.ruff], [tool.mypy]); the `test` extra installs
# the `lint` one (ruff, mypy and the stub packages).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy

# The commit convention (CONTRIBUTING.md): `hooks` installs the commit-msg hook that checks each new
# message; `commits` checks the commits since COMMITS_BASE (by default: since the convention began).
hooks: $(STAMP)
	@hook=$$(git rev-parse --git-path hooks)/commit-msg; \
	if [ -e "$$hook" ] && ! cmp -s .ci/commit-msg "$$hook"; then \
		echo "make hooks: $$hook exists and is not this project's; move it away first" >&2; exit 1; fi; \
	mkdir -p "$$(dirname "$$hook")" && cp .ci/commit-msg "$$hook" && chmod +x "$$hook" && echo "installed $$hook"

commits: $(STAMP)
	COMMITS_BASE="$(COMMITS_BASE)" GITLINT=$(VENV)/bin/gitlint bash .ci/check-commits

# vitlab against timm, transformers and torchvision (docs/benchmarks.md), one preset per target: each writes
# build/bench/PRESET.{json,md}; bench-doc renders docs/benchmarks.md from them and the results kept there.
# Wall time on 2 cores of an AMD EPYC of family 26 model 2 (AVX512), from a cold Inductor cache, one
# preset after another: bench (standard) 11 min 14 s (9 min warm, when it also timed the int8 rows),
# bench-384 9 min 32 s, bench-int8 3 min 28 s, bench-pipelines 1 min 40 s, bench-avx2 16 min 13 s.
# On an EPYC of family 25 (model 17), whose bf16 GEMM peak is about half as high, bench took 20 min
# (with the int8 rows it no longer times; they are bench-int8's).
bench: $(STAMP)
	$(PY) -m vitlab bench --preset standard --out build/bench

# The model-only cases on this CPU run as an AVX2-only one without native bf16: ATen's AVX2 kernels,
# oneDNN and MKL limited to AVX2 (bench.json records the variables); writes build/bench-avx2/.
AVX2_EMULATION := ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
AVX2_BENCH ?= --preset avx2 --rounds 3 --warmup 1

bench-avx2: $(STAMP)
	env $(AVX2_EMULATION) $(PY) -m vitlab bench $(AVX2_BENCH) --out build/bench-avx2

bench-384: $(STAMP)
	$(PY) -m vitlab bench --preset res384 --rounds 3 --out build/bench

bench-int8: $(STAMP)
	$(PY) -m vitlab bench --preset int8 --out build/bench

# Files on disk -> answers: vitlab's predict pipeline against timm's (end to end), and the training input
# pipeline per core against timm's create_transform; each writes its JSON into build/bench/.
bench-pipelines: $(STAMP)
	$(PY) -m vitlab bench --pipeline predict --out build/bench
	$(PY) -m vitlab bench --pipeline train-input --out build/bench

bench-doc: $(STAMP)
	$(PY) -m vitlab bench report --runs $(wildcard build/bench/standard.json build/bench/res384.json build/bench/int8.json build/bench/pipeline.json build/bench/train-input.json build/bench-avx2/avx2.json) docs/benchmarks --out docs/benchmarks.md

# docs/experiments.md from the experiments' own outputs: every registered experiment with its default
# budget on digits (finished run folders in EXP_DIR are resumed, not retrained), then the report.
EXP_DIR ?= runs/exp

experiments-doc: $(STAMP)
	for name in $$($(PY) -c "from vitlab.experiments import EXPERIMENTS; print(*EXPERIMENTS)"); do \
		$(PY) -m vitlab experiment $$name --data digits --out $(EXP_DIR) || exit 1; done
	$(PY) -m vitlab experiment report --runs $(EXP_DIR) --out docs/experiments.md

clean:
	rm -rf $(VENV) .venv-torch-floor build *.egg-info src/*.egg-info .pytest_cache
