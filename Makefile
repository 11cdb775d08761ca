# make demo  - install everything, then run the main job: centralized SGD, FedAvg and BHerd-FedAvg (20 s idle, plus the install)
# make test  - install everything, then run the test suite (all of it: what CI runs)
# make test-fast - the suite without the tests marked slow (Flower, Ray, processes, benchmarks): day-to-day work
# make docs  - serve the documentation site at http://127.0.0.1:8000 (make docs-check: the strict build CI runs)
VENV ?= .venv
# pytest-xdist workers for the tests: one per core (`make test WORKERS=0` runs them in one process)
WORKERS ?= auto
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install bytecode demo test test-fast docs docs-check benchmark clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install.sh
	VENV=$(VENV) bash scripts/install.sh
	touch $(STAMP)

# fedaccel's sources byte-compiled, once: the tests start many Python processes (CLI runs, Flower's
# SuperLink, SuperNodes and apps), and where PYTHONDONTWRITEBYTECODE is set each compiled the sources again
# (an editable install writes no bytecode); only what changed since is compiled
bytecode: install
	$(BIN)/python -m compileall -q fedaccel benchmarks > /dev/null

demo: install
	$(BIN)/fedaccel experiment experiments/demo.yaml

test: bytecode
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist worksteal --durations=15

test-fast: bytecode
	$(BIN)/python -m pytest -q -m "not slow" -n $(WORKERS) --dist worksteal

docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

docs-check: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

benchmark: install
	$(BIN)/python benchmarks/engine_overhead.py

clean:
	rm -rf $(VENV) runs site
