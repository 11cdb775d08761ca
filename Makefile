# make demo  - install everything, then run the main job (FedAvg vs centralized SGD, ~2 minutes)
# make test  - install everything, then run the test suite
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test benchmark clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install.sh
	VENV=$(VENV) bash scripts/install.sh
	touch $(STAMP)

demo: install
	$(BIN)/fedaccel experiment experiments/demo.yaml

test: install
	$(BIN)/python -m pytest -q

benchmark: install
	$(BIN)/python benchmarks/engine_overhead.py

clean:
	rm -rf $(VENV) runs
