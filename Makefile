PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-min docs bench clean

# One pytest worker per core; a test file stays on one worker, so a module's fixtures (the Ray
# cluster, Chromium, the S3 server) start once. A worker that dies ends the run, naming its test
# (xdist's restarted worker can wait forever for the crashed file's tests).
PYTEST_PARALLEL := -n auto --dist loadfile --max-worker-restart 0

$(BIN)/advcli: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

demo: $(BIN)/advcli
	$(BIN)/advcli schema sample_data/rollouts.jsonl
	$(BIN)/advcli annotate sample_data/rollouts.parquet --method grpo --out build/demo/grpo.parquet --force
	$(BIN)/advcli annotate sample_data/rollouts.jsonl --method gae --gamma 1.0 --lam 0.95 --out build/demo/gae.jsonl --force
	$(BIN)/advcli score sample_data/rollouts.parquet --critic sample_data/critic.onnx --device cpu --out build/demo/scored.parquet --force
	$(BIN)/advcli audit sample_data/rollouts.parquet
	$(BIN)/advcli audit sample_data/health.parquet
	$(BIN)/advcli annotate sample_data/trl-chat/completions --from trl --tokenizer sample_data/trl-chat/tokenizer --method reinforce-pp --out build/demo/trl-tokens.parquet --force
	$(BIN)/advcli shard sample_data/rollouts.parquet --method grpo --out build/demo/shards --force
	$(BIN)/advcli verify build/demo/shards
	$(BIN)/advcli report sample_data/rollouts.parquet --method grpo --out build/demo/report.html --force

test: $(BIN)/advcli
	$(BIN)/ruff check advcli tests bench tools
	$(BIN)/ruff format --check advcli tests bench tools
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PYTEST_PARALLEL)

# The suite on the oldest versions pyproject.toml declares (tools/floors.py pins them), in a
# second virtualenv on the same Python: a floor that does not hold fails here.
MIN_VENV := .venv-min
test-min:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install -q --upgrade pip
	$(MIN_VENV)/bin/python -m tools.floors > $(MIN_VENV)/floors.txt
	$(MIN_VENV)/bin/python -m pip install -q -r $(MIN_VENV)/floors.txt
	$(MIN_VENV)/bin/python -m pip install -q --no-deps -e .
	$(MIN_VENV)/bin/python -m pip list --format=freeze | grep -i -E '^(typer|polars|pyarrow|numpy|rich|orjson|zstandard|onnx|onnxruntime|bokeh|ray|moto)=='
	$(MIN_VENV)/bin/python -m pytest -p no:cacheprovider $(PYTEST_PARALLEL)

# The pages made from the code (and the tour's outputs) made anew, then the site, strict and
# offline: a broken link or anchor fails.
docs: $(BIN)/advcli
	$(BIN)/python -m tools.docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet

bench: $(BIN)/advcli
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(MIN_VENV) build
