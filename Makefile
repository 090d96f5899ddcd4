# The two commands of the README: `make book` and `make test`. Also `make lab`, `make notebooks`, `make workbooks`,
# `make bench`, and for the Chinese edition `make pot`, `make book-en`, `make book-zh`.
# Every target first makes sure .venv exists and matches requirements.txt (reinstalled when it changes).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-requirements
NOTEBOOKS := $(sort $(wildcard book/*.ipynb book/appendix/*.ipynb))
export PYDEVD_DISABLE_FILE_VALIDATION := 1
export TOKENIZERS_PARALLELISM := false
# Building, testing and re-running the course never touches the network. Not exported to `make lab`: there a
# learner may download GPT-2 (chapter 11), and the cell that does it says in one line when it cannot.
OFFLINE_TARGETS := book book-en book-zh pot test unit nbval notebooks workbooks bench
$(OFFLINE_TARGETS): export HF_HUB_OFFLINE := 1
$(OFFLINE_TARGETS): export TRANSFORMERS_OFFLINE := 1
# What JupyterLab's file browser leaves out (its defaults, then the book's build folders and output).
LAB_HIDDEN := ["__pycache__", "*.pyc", "*.pyo", ".DS_Store", "*~", "_ext", "_static", "_templates", "_build", "*.egg-info"]

.PHONY: venv book book-en book-zh pot test unit nbval booktest lab notebooks workbooks bench clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	cp requirements.txt $(STAMP)

# Both editions: English at _build/html/, Chinese (from locales/zh_CN) at _build/html/zh/, same page paths.
book: $(STAMP)
	$(BIN)/python scripts/i18n.py build-all

book-en: $(STAMP)
	$(BIN)/jupyter-book build . --path-output . -n -W --keep-going
	@echo "Built: _build/html/index.html"

book-zh: $(STAMP)
	$(BIN)/python scripts/i18n.py build zh_CN

# Refresh the message templates from the book and merge them into locales/zh_CN/LC_MESSAGES/*.po:
# changed English becomes fuzzy (with the old English as `#| msgid`), deleted English becomes obsolete.
pot: $(STAMP)
	$(BIN)/python scripts/i18n.py pot

test: $(STAMP)
	$(BIN)/ruff check companion tests benchmarks
	$(BIN)/python -m pytest tests -m "not book" -n 2 --dist loadfile -q -p no:cacheprovider
	$(BIN)/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with book/nbval_sanitize.cfg \
		-n 2 --dist loadfile -q -p no:cacheprovider $(NOTEBOOKS)
	$(BIN)/python scripts/i18n.py build-all --fresh
	rm -f _build/axe-report.txt
	BOOK_PREBUILT=1 $(BIN)/python -m pytest tests -m book -n 2 -q -p no:cacheprovider

unit: $(STAMP)
	$(BIN)/python -m pytest tests -m "not book" -n 2 --dist loadfile -q

nbval: $(STAMP)
	$(BIN)/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with book/nbval_sanitize.cfg \
		-n 2 --dist loadfile -q $(NOTEBOOKS)

# JupyterLab on the repository, opening the workbooks folder (chapters in book/). Works as root too
# (containers); bound to this machine only. Add LAB_ARGS=--no-browser on a headless box.
lab: $(STAMP)
	$(BIN)/jupyter lab --ip 127.0.0.1 --allow-root --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/workbooks \
		'--ContentsManager.hide_globs=$(LAB_HIDDEN)' $(LAB_ARGS)

# Re-execute every chapter in place, top to bottom, in a fresh kernel: the way stored outputs are refreshed.
notebooks: $(STAMP)
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.timeout=600 --ExecutePreprocessor.record_timing=False \
		--ExecutePreprocessor.kernel_name=python3 $(if $(NB),$(NB),$(NOTEBOOKS))
	$(BIN)/python scripts/nbtools.py metadata $(if $(NB),$(NB),$(NOTEBOOKS))
	$(BIN)/python scripts/make_workbooks.py $(if $(NB),$(NB),$(NOTEBOOKS))

# The exercise workbooks (workbooks/NN_*.ipynb): the chapters without their solutions.
workbooks: $(STAMP)
	$(BIN)/python scripts/make_workbooks.py

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b; done

clean:
	rm -rf _build .pytest_cache
