# The two commands of this project (see README.md):
#   make book   - set up .venv if needed, execute every notebook, build the HTML book into _build/html
#   make test   - set up .venv if needed, run the unit tests and execute every notebook with nbval
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: book test venv clean

venv: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --path-output . -W -n --keep-going
	@echo "Book built: open file://$(CURDIR)/_build/html/index.html"

test: $(STAMP)
	$(VENV)/bin/python -m pytest tests notebooks --nbval-lax --nbval-current-env -p no:cacheprovider; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]

clean:
	rm -rf _build
