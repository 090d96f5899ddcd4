# The two commands of the README: `make book` and `make test`. Also `make pdf`, `make lab`, `make notebooks`,
# `make workbooks`, `make bench`, and for the Chinese edition `make pot`, `make book-en`, `make book-zh`.
# Every target first makes sure .venv exists and matches requirements.txt (reinstalled when it changes).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-requirements
# The stages of `make test` (test-nbval, test-build...) as two chains that run side by side, each stage after the
# one before it in its chain: the book tests need the build, and they end in a browser-bound tail that must
# not run alone at the end; the chains hold about the same CPU time (README "Testing").
CHAIN_1 := build book unit
CHAIN_2 := nbval-10 nbval ruff
STAGES := $(CHAIN_1) $(CHAIN_2)
NOTEBOOKS := $(sort $(wildcard book/*.ipynb book/appendix/*.ipynb))
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# Some machines set PYTHONDONTWRITEBYTECODE; then every process of make test (dozens: workers, kernels, the
# build) would compile the same modules again. Empty, it lets Python cache what it compiles (__pycache__).
export PYTHONDONTWRITEBYTECODE :=
export TOKENIZERS_PARALLELISM := false
# Building, testing and re-running the course never touches the network. Not exported to `make lab`: there a
# learner may download GPT-2 (chapter 11), and the cell that does it says in one line when it cannot.
OFFLINE_TARGETS := book book-en book-zh pdf pot test $(addprefix test-,$(STAGES)) test-chain-1 test-chain-2 book-tests unit nbval nbval-paths notebooks workbooks \
	bench
$(OFFLINE_TARGETS): export HF_HUB_OFFLINE := 1
$(OFFLINE_TARGETS): export TRANSFORMERS_OFFLINE := 1
# What JupyterLab's file browser leaves out (its defaults, then the book's build folders and output).
LAB_HIDDEN := ["__pycache__", "*.pyc", "*.pyo", ".DS_Store", "*~", "_ext", "_static", "_templates", "_build", "*.egg-info"]

.PHONY: venv book book-en book-zh pdf pot test $(addprefix test-,$(STAGES)) test-chain-1 test-chain-2 book-tests unit nbval nbval-paths lab notebooks workbooks \
	bench clean

venv: $(STAMP)

# The pins install in four pip processes at once (scripts/install_pins.py: requirements.txt pins every
# dependency, so pip has nothing to resolve; about 20 s on a fresh clone instead of 70). Nothing is
# byte-compiled ahead: Python compiles each module the first time one of make's processes imports it (most
# of the 17,000 files of the venv are never imported; compiling them all took 35 s).
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python scripts/install_pins.py requirements.txt
	cp requirements.txt $(STAMP)

# Both editions: English at _build/html/, Chinese (from locales/zh_CN) at _build/html/zh/, same page paths.
book: $(STAMP)
	$(BIN)/python scripts/i18n.py build-all

book-en: $(STAMP)
	$(BIN)/jupyter-book build . --path-output . -n -W --keep-going
	@echo "Built: _build/html/index.html"

book-zh: $(STAMP)
	$(BIN)/python scripts/i18n.py build zh_CN

# The whole book as one PDF per edition (scripts/pdf.py: Chromium prints the built HTML; a few minutes on 2 cores):
# _build/pdf/transformers-piece-by-piece.pdf and -zh.pdf, also copied into each edition's site root, where every
# page's download menu links to it. Builds the HTML book first when it is missing.
pdf: $(STAMP)
	test -f _build/html/zh/index.html || $(BIN)/python scripts/i18n.py build-all
	$(BIN)/python scripts/pdf.py

# Refresh the message templates from the book and merge them into locales/zh_CN/LC_MESSAGES/*.po:
# changed English becomes fuzzy (with the old English as `#| msgid`), deleted English becomes obsolete.
pot: $(STAMP)
	$(BIN)/python scripts/i18n.py pot

# `make test`: the venv, then the six stages in two chains (make -j2, each stage itself on two processes), then
# a table of each stage's wall and CPU seconds, failed ones included. A failing stage fails make test; the other
# stages still run (the book tests only if the build passed). `make test-unit`, `make test-book`... run one
# stage (test-book builds first).
TIMES := _build/test-times.tsv
TIMED = $(PYTHON) scripts/timed.py $(TIMES)
# The floating-point path of make test's nbval: generic kernels and MKL's compatible path, never the one
# `make notebooks` stores outputs from (native), so an output that depends on the processor fails here, on
# every machine, not only on a reader's. Override with NBVAL_FP_ENV= (native) or another setting.
NBVAL_FP_ENV ?= ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE
# Chapters 10-14 spend most of their time training: on MKL's compatible path their matrix products take about
# twice as long, and PyTorch's generic kernels cost another 25 %, so make test runs them on PyTorch's AVX2
# kernels and MKL's reproducible AVX2 branch (not the native path either: on an AVX-512 machine both differ from
# it; this path caught more of those chapters' fragile cells than the compatible one, README "Portable
# outputs"). make nbval-paths runs every chapter on the compatible path.
NBVAL_FP_ENV_10 ?= ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2
NOTEBOOKS_10 := $(filter book/1%,$(NOTEBOOKS))
NATIVE_FP := env -u ATEN_CPU_CAPABILITY -u MKL_CBWR
# A kernel may take more than nbval's default 60 s to start on a machine busy with other work (seen in a run
# beside three notebook executions): a slow start is no fault of a chapter, so it gets 300 s.
NBVAL := $(BIN)/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with book/nbval_sanitize.cfg \
	--nbval-kernel-startup-timeout 300 -n 2 --dist loadfile -q -p no:cacheprovider

test:
	@rm -f $(TIMES)
	@rc=0; $(TIMED) venv -- $(MAKE) --no-print-directory venv \
		&& $(MAKE) --no-print-directory -k -j2 -O test-chain-1 test-chain-2 || rc=$$?; \
		$(TIMED) --report venv $(STAGES) || rc=1; exit $$rc

# One chain: its stages in order; a stage that fails fails the chain after the others have run (the book
# tests only after a build that passed). The book stage runs here without test-book's prerequisite.
test-chain-1 test-chain-2: $(STAMP)
	@rc=0; built=1; for stage in $(CHAIN_$(subst test-chain-,,$@)); do \
		if [ $$stage = book ]; then [ $$built = 1 ] || continue; target=book-tests; else target=test-$$stage; fi; \
		$(MAKE) --no-print-directory $$target || { rc=1; [ $$stage = build ] && built=0; }; \
	done; exit $$rc

test-build: $(STAMP)
	@$(TIMED) build -- $(BIN)/python scripts/i18n.py build-all --fresh --templates

test-ruff: $(STAMP)
	@$(TIMED) ruff -- $(BIN)/ruff check companion tests benchmarks scripts/timed.py

test-unit: $(STAMP)
	@$(TIMED) unit -- $(BIN)/python -m pytest tests -m "not book" -n 2 --dist loadfile -q -p no:cacheprovider

# Chapters 10-14 (longest first), then the others (in reverse order: the longer ones go first to the workers).
test-nbval-10: $(STAMP)
	@$(TIMED) nbval-10 -- env $(NBVAL_FP_ENV_10) $(NBVAL) $(shell printf '%s\n' $(NOTEBOOKS_10) | sort -r)

test-nbval: $(STAMP)
	@$(TIMED) nbval -- env $(NBVAL_FP_ENV) $(NBVAL) $(shell printf '%s\n' $(filter-out $(NOTEBOOKS_10),$(NOTEBOOKS)) | sort -r)

test-book: $(STAMP) test-build
	@$(MAKE) --no-print-directory book-tests

book-tests: $(STAMP)
	@rm -f _build/axe-report.txt
	@$(TIMED) book -- env BOOK_PREBUILT=1 $(BIN)/python -m pytest tests -m book -n 2 -q -p no:cacheprovider

unit: $(STAMP)
	$(BIN)/python -m pytest tests -m "not book" -n 2 --dist loadfile -q

# nbval on every chapter, or on one: `make nbval NB=book/12_family.ipynb`. It runs on the floating-point path
# of its environment; to reproduce a failure of make test's nbval stage:
# `ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE make nbval NB=...`.
nbval: $(STAMP)
	$(NBVAL) $(if $(NB),$(NB),$(NOTEBOOKS))

# The stored outputs hold on three floating-point paths: native, AVX2 kernels, generic kernels with MKL's
# compatible path (the last is make test's). Not part of make test (three times nbval's time).
nbval-paths: $(STAMP)
	@rc=0; for path in "" "ATEN_CPU_CAPABILITY=avx2" "ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE"; do \
		echo "== nbval on the $${path:-native} path"; \
		$(NATIVE_FP) $$path $(NBVAL) $(if $(NB),$(NB),$(NOTEBOOKS)) || { rc=1; echo "== FAILED on the $${path:-native} path"; }; \
	done; exit $$rc

# JupyterLab on the repository, opening the workbooks folder (chapters in book/). Works as root too
# (containers); bound to this machine only. Add LAB_ARGS=--no-browser on a headless box.
# binder/jupyter_lab_config.py: Chinese text and the checks' ✅/❌ drawn with the fonts the course installs.
lab: $(STAMP)
	$(BIN)/jupyter lab --config=binder/jupyter_lab_config.py \
		--ip 127.0.0.1 --allow-root --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/workbooks \
		'--ContentsManager.hide_globs=$(LAB_HIDDEN)' $(LAB_ARGS)

# Re-execute every chapter in place, top to bottom, in a fresh kernel: the way stored outputs are refreshed,
# always on the native floating-point path (ATEN_CPU_CAPABILITY and MKL_CBWR unset).
notebooks: $(STAMP)
	$(NATIVE_FP) $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
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
