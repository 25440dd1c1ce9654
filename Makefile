# The two commands of this project (see README.md):
#   make book   - set up .venv if needed, execute every notebook, build the HTML book into _build/html
#   make test   - set up .venv if needed, run the unit tests and execute every notebook with nbval
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Headless browser for tests/test_site.py (Debian's package; never a downloaded browser build)
CHROMIUM := /usr/bin/chromium

.PHONY: book test venv vendor clean

venv: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt requirements-bench.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt -r requirements-bench.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	$(PY) tools/install_linters.py
	touch $(STAMP)

# require.js and the ipywidgets embed manager from the npm registry into vendor_static/ (git-ignored),
# served by the book itself instead of CDNs; does nothing when the pinned versions are there
vendor: $(STAMP)
	$(PY) tools/vendor_static.py

book: $(STAMP) vendor
	$(VENV)/bin/jupyter-book build . --path-output . -W -n --keep-going
	@echo "Book built: open file://$(CURDIR)/_build/html/index.html"

$(CHROMIUM):
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

test: $(STAMP) $(CHROMIUM)
	$(VENV)/bin/python -m pytest tests notebooks --nbval-lax --nbval-current-env -p no:cacheprovider; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]

clean:
	rm -rf _build
