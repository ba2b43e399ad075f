# istrace top-level build. Each part has its own Makefile; this one ties them together.
PYTHON ?= python3
PARTS  := decoder initiator-gen kernel bpf scripts
PREFIX ?= /usr/local
DEPS_STAMP := .deps.stamp

.PHONY: all deps build install test test-c test-py lint demo clean $(PARTS)

all: build

# Re-run the installer when it changes; it is idempotent and fast when nothing is missing.
deps: $(DEPS_STAMP)
$(DEPS_STAMP): scripts/deps.sh scripts/requirements.txt scripts/constraints.txt
	bash scripts/deps.sh
	@touch $@

build: $(DEPS_STAMP) $(PARTS)

# A part without a Makefile yet is skipped, so the tree builds while parts are being added.
$(PARTS):
	@if [ -f $@/Makefile ]; then $(MAKE) --no-print-directory -C $@; fi

# Debian's python3 marks itself externally managed (PEP 668); istrace installs system-wide as root.
PIP_FLAGS := $(shell $(PYTHON) -c 'import os,sysconfig; print("--break-system-packages" if os.path.exists(os.path.join(sysconfig.get_path("stdlib"),"EXTERNALLY-MANAGED")) else "")' 2>/dev/null)

install: build
	$(PYTHON) -m pip install -q $(PIP_FLAGS) --no-build-isolation -e .
	@for p in $(PARTS); do if [ -f $$p/Makefile ]; then $(MAKE) --no-print-directory -C $$p install PREFIX=$(PREFIX) || exit 1; fi; done

# lint-imports reads the four source folders as one namespace (the editable install's
# finder is not a directory grimp can scan); the contract is in pyproject.toml. mypy checks
# the whole package the same way: its four roots are [tool.mypy]'s mypy_path.
lint: $(DEPS_STAMP)
	$(PYTHON) -m ruff check .
	PYTHONPATH=scripts:bpf:decoder:viz $(PYTHON) -c "from importlinter.cli import lint_imports_command as m; m()"
	$(PYTHON) -m mypy

test-c: build
	@for p in $(PARTS); do if [ -f $$p/Makefile ]; then $(MAKE) --no-print-directory -C $$p test || exit 1; fi; done

# Tests run this tree's sources and binaries in place (pytest's pythonpath, paths.binary), so
# `make test` in a clone never re-points the installed `istrace` command at that clone.
test-py: build
	$(PYTHON) -m pytest -q tests

test: lint test-c test-py

demo: install
	bash scripts/demo.sh

clean:
	@for p in $(PARTS); do if [ -f $$p/Makefile ]; then $(MAKE) --no-print-directory -C $$p clean; fi; done
	rm -f $(DEPS_STAMP)
