# The two commands a new user needs (README): `make run` and `make test`.
.PHONY: run test setup lint format bench

run:
	bash scripts/run.sh

test:
	bash scripts/test.sh

setup:
	bash scripts/setup.sh --test

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

format:
	.venv/bin/ruff check --fix . && .venv/bin/ruff format .

bench:
	.venv/bin/python bench/planner_accuracy.py && .venv/bin/python bench/planner_speed.py
