# The commands of this project (see README.md, "The two commands"):
#   make book      - set up .venv if needed, execute every notebook, build the HTML book into _build/html
#   make test      - set up .venv if needed; the unit tests not marked slow/browser, and every notebook under nbval,
#                    in two worker processes, each file whole on one worker (a few minutes; a notebook over its
#                    budget, in units of a calibration timed on the same machine, fails it: see tests/notebook_budget.py)
#   make test-all  - make test plus the slow tests (checkpoint retraining, benchmarks' quick modes, a fresh venv)
#                    and the browser tests (a headless Chromium or Chrome; skipped with a reason when none is found)
#   make test-site - after make book: the tests that read _build/html (links, the 404 page, live figures in their pages)
# Nothing here needs root: the browser and npm are yours to install (README, Requirements).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# OMP_WAIT_POLICY=PASSIVE: OpenMP threads sleep instead of spinning between kernels; with two processes on two
# cores, spinning threads starve the other process (a notebook took 84 s instead of 30 s without it)
PYTEST := OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest tests notebooks --nbval-lax --nbval-current-env -p no:cacheprovider -rs
# pytest exits 5 when it collected no test: not a failure here
PYTEST_OK := rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]

.PHONY: book test test-all test-site venv vendor clean

venv: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt requirements-bench.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt -r requirements-bench.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	$(PY) tools/install_linters.py
	touch $(STAMP)

# require.js and the ipywidgets embed manager from the npm registry into vendor_static/ (git-ignored),
# served by the book itself instead of CDNs; does nothing when the pinned versions are there.
# Without npm it stops with one sentence saying what to install.
vendor: $(STAMP)
	$(PY) tools/vendor_static.py

book: $(STAMP) vendor
	$(VENV)/bin/jupyter-book build . --path-output . -W -n --keep-going
	@echo "Book built: open file://$(CURDIR)/_build/html/index.html"

# two workers: a notebook's kernel mostly waits on one core while the other runs another notebook or the unit tests
test: $(STAMP)
	$(PYTEST) -m "not slow and not browser" -n 2 --dist loadfile; $(PYTEST_OK)

test-all: $(STAMP)
	$(PYTEST); $(PYTEST_OK)

# the tests that read the built book (links and anchors, 404 page, live figures in their pages): after make book
test-site: $(STAMP)
	REQUIRE_SITE=1 $(PY) -m pytest tests -m site -p no:cacheprovider -rs

clean:
	rm -rf _build
