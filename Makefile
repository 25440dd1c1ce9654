# The commands of this project (see README.md, "The two commands"):
#   make book      - set up .venv if needed, execute every notebook, build the HTML book into _build/html (English)
#                    and _build/html/zh (中文, the same execution)
#   make test      - set up .venv if needed; make lint (a second), then the unit tests not marked slow/browser, and
#                    every notebook under nbval, in two worker processes, each file whole on one worker (a few
#                    minutes; a notebook over its budget, in units of a calibration timed on the same machine, fails
#                    it: see tests/notebook_budget.py); a notebook that passed here before, and whose source and
#                    imported library files are unchanged since, is skipped (tests/notebook_record.py)
#   make test-all  - make lint, then make test's tests plus the slow tests (checkpoint retraining, benchmarks' quick
#                    modes, a fresh venv) and the browser tests (a headless Chromium or Chrome; skipped with a reason
#                    when none is found)
#   make test-site - after make book: the tests that read _build/html (links, the 404 page, live figures in their pages)
#   make lint      - ruff check and ruff format --check over the package, tests, tools, benchmarks, scripts, notebooks
# Nothing here needs root: the browser and npm are yours to install (README, Requirements).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TRITON_STAMP := $(VENV)/.triton-installed
# OMP_WAIT_POLICY=PASSIVE: OpenMP threads sleep instead of spinning between kernels; with two processes on two
# cores, spinning threads starve the other process (a notebook took 84 s instead of 30 s without it)
PYTEST := OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest tests notebooks --nbval-lax --nbval-current-env -p no:cacheprovider -rs
# A false claim fails the tests (transformer_lib/book_tools/claims.py): strict mode. `make book` leaves BOOK_CLAIMS to the
# caller: report mode for a reader (the page shows the failed claim and the build goes on), strict under CI=true.
STRICT := BOOK_CLAIMS=strict
# pytest exits 5 when it collected no test: not a failure here
PYTEST_OK := rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]

.PHONY: book test test-all test-site lint venv triton vendor clean book-en book-zh i18n-update i18n-check

venv: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt requirements-bench.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt -r requirements-bench.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	$(PY) tools/install_linters.py
	touch $(STAMP)

# Triton (optional, ~1 GB, requirements-triton.txt): chapter 10's kernel and its interpreter tests; installed where
# a wheel exists (Linux x86_64), skipped with one line elsewhere (the chapter and the tests then say it is absent)
triton: $(TRITON_STAMP)

$(TRITON_STAMP): requirements-triton.txt $(STAMP)
	if [ "$$(uname -s)-$$(uname -m)" = "Linux-x86_64" ]; then $(PY) -m pip install -q -r requirements-triton.txt; \
	else echo "no Triton wheel for $$(uname -s)-$$(uname -m): chapter 10 runs without its kernel"; fi
	touch $(TRITON_STAMP)

# require.js and the ipywidgets embed manager from the npm registry into vendor_static/ (git-ignored),
# served by the book itself instead of CDNs; does nothing when the pinned versions are there.
# Without npm it stops with one sentence saying what to install.
vendor: $(STAMP)
	$(PY) tools/vendor_static.py

# both editions (tools/book_i18n.py build: Jupyter Book's Sphinx build with -W -n --keep-going, as
# `jupyter-book build` runs it), English in _build/html and Chinese (README, "Translating the book") in
# _build/html/zh, with the language switch on every page, from one execution cache: the English edition executes
# the notebooks, the Chinese one reads the same run from the cache (nothing executes twice)
book: $(STAMP) $(TRITON_STAMP) vendor
	$(PY) tools/book_i18n.py build
	@echo "Book built: open file://$(CURDIR)/_build/html/index.html (English) or file://$(CURDIR)/_build/html/zh/index.html (中文)"

# one edition only: the English (a quicker loop while writing) or, after it, the Chinese one (while translating)
book-en: $(STAMP) $(TRITON_STAMP) vendor
	$(PY) tools/book_i18n.py build --only en

book-zh: $(STAMP) $(TRITON_STAMP) vendor
	$(PY) tools/book_i18n.py build --only zh_CN

# extract the English messages and update locales/zh_CN/LC_MESSAGES/<page>.po (changed sentences become fuzzy)
i18n-update: $(STAMP)
	$(PY) tools/book_i18n.py update

# the catalogs keep every glue role, link, inline code and math of the English; RELEASE=1: nothing fuzzy or missing
i18n-check: $(STAMP)
	$(PY) tools/book_i18n.py check $(if $(RELEASE),--release)

# The two heaviest chapters (about 1,040 of the notebooks' 4,050 budget units) run in make test-all, make book and
# the book workflow on every push, not in the fast loop: with them, make test took about 5.8 minutes of pytest on
# the slower machine of house rule 8, over issue 23's 5 (README, "Commands"). Named by slug (a notebook's file name;
# its number is its place in _toc.yml)
FAST_LOOP_SKIPS := kv_cache pruning
# two workers: a notebook's kernel mostly waits on one core while the other runs another notebook or the unit tests
test: $(STAMP) lint
	$(STRICT) $(PYTEST) -m "not slow and not browser" $(patsubst %,--ignore=notebooks/%.ipynb,$(FAST_LOOP_SKIPS)) -n 2 --dist loadfile --skip-passed-notebooks; $(PYTEST_OK)

test-all: $(STAMP) $(TRITON_STAMP) lint
	$(STRICT) $(PYTEST); $(PYTEST_OK)

# the tests that read the built book (links and anchors, 404 page, live figures in their pages): after make book
test-site: $(STAMP)
	REQUIRE_SITE=1 $(PY) -m pytest tests -m site -p no:cacheprovider -rs

# ruff (pinned in requirements.txt, configured in pyproject.toml): lint findings, then the files the formatter would
# change (it only checks: `$(PY) -m ruff format .` rewrites them)
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check --output-format concise .

clean:
	rm -rf _build

# every claim's verdict per setting (default, ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE, one thread, seeds
# offset, one busy core, CUDA when present): tools/perturb.py; exit status 1 when a claim fails. Settings run one
# after another; all of them on all notebooks take a long while. Options: PERTURB_ARGS="--settings default,seed-offset"
NOTEBOOKS ?=
PERTURB_ARGS ?=
.PHONY: perturb
perturb: $(STAMP)
	$(PY) tools/perturb.py $(NOTEBOOKS) $(PERTURB_ARGS)
