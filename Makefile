# Parley. `make run` starts everything for local use; `make test` runs every check CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
HOST ?= 127.0.0.1
# Where `make run`'s web and worker processes keep their metrics, which /metrics adds up.
PROMETHEUS_MULTIPROC_DIR ?= $(CURDIR)/var/metrics

.PHONY: install run test lint imports typecheck migrations-check pytest browser bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall whenever a requirements file changes.
$(VENV)/.installed: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed

# Without REDIS_URL an embedded Valkey joins the processes; Ctrl-C stops them all.
# honcho hands each process its own PORT, so the web port travels as PARLEY_PORT.
run: install
	@# Beat keeps its schedule in var/ (or PARLEY_BEAT_SCHEDULE), which a fresh clone lacks
	@# when neither SQLite nor the embedded Valkey made it.
	@mkdir -p var "$$(dirname "$${PARLEY_BEAT_SCHEDULE:-var/celerybeat-schedule}")"
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py ensure_demo_user
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	@echo ""
	@echo "  Parley is running at http://$(HOST):$(PORT)/"
	@echo "  Log in as: $${PARLEY_DEMO_USERNAME:-demo} / $${PARLEY_DEMO_PASSWORD:-demo}"
	@echo "  Admin: http://$(HOST):$(PORT)/admin/"
	@echo ""
	@# Each process counts into its own files there; emptied at each start, so the counts
	@# begin again with the processes instead of adding up the last run's.
	@mkdir -p "$(PROMETHEUS_MULTIPROC_DIR)" && rm -f "$(PROMETHEUS_MULTIPROC_DIR)"/*.db
	PROMETHEUS_MULTIPROC_DIR="$(PROMETHEUS_MULTIPROC_DIR)" \
	PARLEY_HOST=$(HOST) PARLEY_PORT=$(PORT) $(BIN)/honcho start -f Procfile \
		$$( [ -z "$$REDIS_URL" ] && echo valkey ) web worker beat

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The layers (docs/ARCHITECTURE.md): the contracts live in pyproject.toml.
imports: install
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy .

migrations-check: install
	$(BIN)/python manage.py makemigrations --check --dry-run

# The browser tests drive Debian's Chromium (Playwright's own browser download is never
# used); installed here when missing, which needs root (as on CI) or sudo.
browser:
	@[ -x /usr/bin/chromium ] || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update && $$SUDO apt-get install -y chromium; }
	@/usr/bin/chromium --version 2>/dev/null

# Two test processes (pytest-xdist): most tests wait on sockets, child processes and the
# browser, so two keep the cores busy. A file's tests stay in one process, as they share a
# browser and a stack of processes; each process has its own test database and Redis.
pytest: install browser
	$(BIN)/pytest -n 2 --dist loadfile

test: lint imports typecheck migrations-check pytest

bench: install
	$(BIN)/python -m bench.state
	$(BIN)/python -m bench.branches

clean:
	rm -rf $(VENV) staticfiles var .mypy_cache .pytest_cache .ruff_cache .hypothesis .grimp_cache .import_linter_cache
