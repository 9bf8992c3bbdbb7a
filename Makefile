# Two entry points: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The reference data sits beside the repository; without it the demo uses a dataset shipped by scikit-learn.
DATA   ?= $(wildcard ../shared/data/imagenette)
# The notebooks read Imagenette from the IMAGENETTE variable (else scikit-learn's digits).
NB_DATA := $(if $(DATA),IMAGENETTE=$(abspath $(DATA)))

.PHONY: demo test test-fast lint types wheel notebooks docs docs-check setup peer-envs clean

setup: $(STAMP)

# The peers benchmark's environments (benchmarks/peers/envs.sh): .venv-peers (timm, fastai) for `make test`'s quick
# run of every side; `make peer-envs` also builds .venv-composer (Composer pins torch 2.7: ~3 GB of downloads).
PEERS := .venv-peers/.installed
$(PEERS): benchmarks/peers/envs.sh
	bash benchmarks/peers/envs.sh peers && touch $@

peer-envs:
	bash benchmarks/peers/envs.sh peers composer

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[dev]"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/lightning-efficient demo $(if $(DATA),--data $(DATA)) --out demo-results.json --plot demo-results.png

test: $(STAMP) $(PEERS)
	$(NB_DATA) $(PY) -m pytest -q --durations=10 -m "not cuda" tests --nbmake --nbmake-timeout=600 notebooks

# For development: without the slow end-to-end runs, the DDP subprocesses and the notebooks (a few minutes).
test-fast: $(STAMP)
	$(PY) -m pytest -q -x -m "not cuda and not slow and not ddp" tests

# ruff: the lint rules and the format check of [tool.ruff] in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy on the package ([tool.mypy] in pyproject.toml).
types: $(STAMP)
	$(VENV)/bin/mypy

# The wheel and the sdist into dist/; tests/test_wheel.py installs the wheel into a fresh environment.
wheel: $(STAMP)
	$(PY) -m build --no-isolation --outdir dist .

# Re-execute every notebook and store its outputs in place (tables, plots, reports as produced on this machine),
# without per-cell timestamps. Each runs with notebooks/ as its working directory, as under nbmake in `make test`,
# which re-executes them without writing and fails if one no longer runs. tune()'s decisions go to an empty, temporary
# cache, so that the stored outputs show measurements, not a decision reused from an earlier run.
notebooks: $(STAMP)
	$(NB_DATA) LIGHTNING_EFFICIENT_CACHE=$$(mktemp -d) $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.record_timing=False notebooks/*.ipynb

# The documentation site (MkDocs + Material) into site/, offline and strict: a broken link or reference, a docstring
# warning or an asset loaded from the network fails the build. Notebooks are rendered with their stored outputs.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The built site read as a reader sees it: every page in headless Chromium at 1280 px, failing on any code block
# or table wider than its column (docs/check_layout.py; screenshots of a few pages in site-shots/). Needs
# playwright (the docs-check extra, installed here) and a system Chromium: apt-get install chromium-headless-shell.
docs-check: docs
	@$(PY) -c "import playwright" 2>/dev/null || $(PY) -m pip install -q --disable-pip-version-check -e ".[docs-check]"
	$(PY) docs/check_layout.py --site site --shots site-shots

clean:
	rm -rf $(VENV) .venv-peers .venv-composer .peers-work lightning_logs demo-results.json demo-results.png site site-shots dist
