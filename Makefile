# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
EXTRAS ?= llm,llama,dev

.PHONY: install demo test test-slow test-all bench clean help

help:
	@echo "make demo       create .venv, install, train phase 1+2 on the built-in market, evaluate, report"
	@echo "make test       create .venv if missing, install, run the default test suite (~10 min)"
	@echo "make test-slow  the slow tests (training proofs on real data, real-model checks)"
	@echo "make bench      environment, training and LLM throughput benchmarks"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: the CPU build already on disk (never a multi-GB CUDA download)
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/hybrid-trader demo

test: install
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: install
	$(BIN)/python -m pytest -q -m slow || [ $$? -eq 5 ]  # exit 5: no test is marked slow at the moment

test-all: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/hybrid-trader bench env --data ../shared/data/NQ_1min_2023-11_eastern.csv
	$(BIN)/hybrid-trader bench train --n-envs 1
	$(BIN)/hybrid-trader bench llm --backend transformers --batch 16

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist src/*.egg-info
