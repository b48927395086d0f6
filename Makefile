# The two commands of the README: `make cache` and `make test`. Both install what they need.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
JOBS ?= $(shell nproc)
CACHE_DIR ?= cache
DEB_PACKAGES = lld-22 llvm-22 llvm-22-dev liblld-22-dev g++
# geometries.yaml (the file users edit) and the package's copy, which an installed wheel reads
PACKAGED_GEOMETRIES = src/wgradcache/data/geometries.yaml

.PHONY: deps cache test lint bench clean devcache device-test

deps: .deps-stamp $(PACKAGED_GEOMETRIES)
# An edit of the root file reaches the package here; a copy newer than the root (a merge that
# changed only it) is left alone, and tests/packaging/test_geometries_copy.py names the pair.
$(PACKAGED_GEOMETRIES): geometries.yaml
	cp geometries.yaml $@
.deps-stamp: pyproject.toml Makefile
	@if ! command -v ld.lld-22 >/dev/null 2>&1 || ! command -v llc-22 >/dev/null 2>&1 || \
	    ! test -f /usr/lib/llvm-22/include/lld/Common/Driver.h || \
	    ! test -f /usr/lib/llvm-22/include/llvm-c/Disassembler.h || ! command -v g++ >/dev/null 2>&1; then \
	  echo "installing Debian packages: $(DEB_PACKAGES)"; \
	  (apt-get install -y -q $(DEB_PACKAGES) >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null && apt-get install -y -q $(DEB_PACKAGES))); \
	fi
	$(PIP) install -q --disable-pip-version-check -e '.[test]'
	@touch $@

cache: deps
	wgradcache build --target gfx1250 --jobs $(JOBS) --cache-dir $(CACHE_DIR)

test: deps
	$(PYTHON) -m pytest -n $(JOBS) tests

# The sm_90 caches the device run carries (devcache/ is git-ignored: .git/info/exclude):
# benchmarks/device_caches.sh says which and how (~15 min on 2 cores).
devcache: deps
	JOBS=$(JOBS) sh benchmarks/device_caches.sh

# On a machine with an sm_90 GPU (the CUDA image: torch, cuda-bindings), from the repo root:
# verify --device cuda on devcache/cache, then benchmarks/device_speed.py; results in $$OUT.
device-test:
	sh benchmarks/device_run.sh

lint: deps
	ruff check src tests benchmarks

bench: deps
	$(PYTHON) benchmarks/build.py

clean:
	rm -rf .deps-stamp .pytest_cache
