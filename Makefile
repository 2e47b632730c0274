# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
EXTRAS ?= llm,llama,dev,study,watch
# The default suite runs on this many processes (pytest-xdist; each test file stays on one): 0 runs it in one process
TEST_WORKERS ?= 2

.PHONY: install lock demo test test-slow test-all lint bench clean help chromium

help:
	@echo "make demo       create .venv, install, train phase 1+2 on the built-in market, evaluate, report"
	@echo "make test       create .venv if missing, install (+ headless Chromium), run the default test suite (~20 min on 2 cores)"
	@echo "make lint       ruff (style, import order, complexity) and mypy on src/"
	@echo "make test-slow  the slow tests (training proofs on real data, real-model checks)"
	@echo "make bench      environment, training and LLM throughput benchmarks"
	@echo "make lock       rewrite constraints.txt from .venv (after upgrading a package on purpose)"

# constraints.txt pins every package to the version the results were made with (`make lock` rewrites it)
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: the CPU build already on disk (never a multi-GB CUDA download)
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[$(EXTRAS)]'
	touch $(STAMP)

install: $(STAMP)

# On purpose only: after upgrading a package in .venv (and rerunning the tests), pin what is installed now.
# Local version labels (torch's +cpu) are dropped so that the same pin matches the CPU wheel and PyPI's.
lock:
	test -x $(BIN)/python || { echo "no $(VENV): run make install first"; exit 1; }
	{ echo "# Versions the results were made with: \`make install\` installs with -c constraints.txt."; \
	  echo "# Regenerate on purpose with \`make lock\` (pip freeze of .venv, the project itself left out)."; \
	  $(BIN)/python -m pip freeze --all --exclude-editable | grep -v '^pip==' | sed -E 's/\+[A-Za-z0-9.]+$$//'; \
	} > constraints.txt.new
	mv constraints.txt.new constraints.txt

demo: install
	$(BIN)/hybrid-trader demo

# Headless Chromium renders the HTML report in its tests: installed when we are root with apt-get
# (Debian/Ubuntu), else the command to install it is printed and the suite stops (CHROMIUM=skip to run without).
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ "$(CHROMIUM)" = "skip" ]; then \
	  echo "note: CHROMIUM=skip: the report rendering tests will be skipped"; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing headless Chromium (apt-get install chromium) for the report rendering tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "headless Chromium is missing: the report rendering tests need it."; \
	  echo "  install it:   sudo apt-get install -y chromium   (Debian/Ubuntu; macOS: brew install --cask chromium)"; \
	  echo "  or run without those tests:   make test CHROMIUM=skip"; \
	  exit 1; \
	fi

test: install chromium
	$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile

lint: install
	$(BIN)/ruff check src tests
	$(BIN)/mypy

test-slow: install
	$(BIN)/python -m pytest -q -m slow || [ $$? -eq 5 ]  # exit 5: no slow test collected

test-all: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/hybrid-trader bench env --data ../shared/data/NQ_1min_2023-11_eastern.csv
	$(BIN)/hybrid-trader bench train --n-envs 1
	$(BIN)/hybrid-trader bench llm --backend transformers --batch 16

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist src/*.egg-info
