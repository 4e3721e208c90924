PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test docs bench clean

$(BIN)/advcli: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

demo: $(BIN)/advcli
	$(BIN)/advcli schema sample_data/rollouts.jsonl
	$(BIN)/advcli annotate sample_data/rollouts.parquet --method grpo --out build/demo/grpo.parquet --force
	$(BIN)/advcli annotate sample_data/rollouts.jsonl --method gae --gamma 1.0 --lam 0.95 --out build/demo/gae.jsonl --force
	$(BIN)/advcli audit sample_data/rollouts.parquet
	$(BIN)/advcli shard sample_data/rollouts.parquet --method grpo --out build/demo/shards --force
	$(BIN)/advcli verify build/demo/shards

test: $(BIN)/advcli
	$(BIN)/ruff check advcli tests bench tools
	$(BIN)/ruff format --check advcli tests bench tools
	$(BIN)/mypy
	$(BIN)/python -m pytest

docs: $(BIN)/advcli
	$(BIN)/python -m tools.docs

bench: $(BIN)/advcli
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build
