# Spirula: `make demo` and `make test` are the two set-up commands (README).
# Both go through `make install`, which is idempotent and fast when nothing changed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.spirula-installed

.PHONY: install demo test bench shaders cuda wheel wheel-check lint format clean

install:
	@bash scripts/install_system_deps.sh
	@$(MAKE) --no-print-directory $(STAMP)
	@bash scripts/build_cuda.sh

# The optional CUDA backend (build/libspirula_cuda.so): skipped with one line,
# and exit status 0, without nvcc or when the build fails.
cuda:
	@bash scripts/build_cuda.sh

$(STAMP): pyproject.toml CMakeLists.txt third_party/kompute/kp-0.9.0-spirula.patch scripts/build_kp.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check -U pip setuptools wheel
	@bash scripts/build_kp.sh $(BIN)/python
	@# numpy>=2 moves a venv made under the old numpy<2 pin to the numpy CI tests
	@$(BIN)/python -m pip install -q --disable-pip-version-check -e ".[dev]" "numpy>=2"
	@# scikit-build-core's editable install puts an import hook before sys.path, which would
	@# shadow PYTHONPATH (a benchmark's +tree=DIR, a worktree's tests): keep its path line only
	@$(BIN)/python -c "import pathlib, site; [p.write_text(''.join(l for l in p.read_text().splitlines(True) if not l.startswith('import '))) for d in site.getsitepackages() for p in pathlib.Path(d).glob('_editable_skbc_*.pth')]"
	@touch $(STAMP)
	@echo "spirula: installed into $(VENV)/ ($(BIN)/spirula)"

# The binary wheel, dist/spirula-*-cpXY-cpXY-manylinux_*.whl (docs/development.md, "The
# wheel"): kp patched and compiled in, every kernel precompiled, the CUDA backend where nvcc
# is (SPIRULA_WHEEL_CUDA=0: without). WHEEL_PYTHON=python3.X builds for another CPython.
wheel: install
	@bash scripts/build_wheel.sh

# The wheel as a user installs it: a fresh venv outside the checkout, pip install of the
# wheel alone, then devices, selftest and a short demo training from there (no glslang),
# and auditwheel show. CI runs it (.ci/run).
wheel-check: wheel
	@bash scripts/wheel_check.sh

shaders: install
	@$(BIN)/spirula shaders

demo: install shaders
	$(BIN)/spirula devices
	$(BIN)/spirula train --output outputs/demo

# the tests also drive a headless chromium (tests/test_web_viewer.py) and Blender
# (tests/test_mesh_viewers.py): they come with them
test: install shaders
	@bash scripts/install_system_deps.sh --browser-tests
	@bash scripts/install_blender.sh
	@bash scripts/install_sam2_reference.sh
	@# the independent readers and renderer (Spark) of the share formats
	@# (tests/test_export_web.py), pinned by the lock file; installed again only
	@# when it changes (without them those tests skip)
	@test tests/web/node_modules/.package-lock.json -nt tests/web/package-lock.json || \
		(cd tests/web && npm ci --no-audit --no-fund --silent) || \
		echo "spirula: npm ci failed in tests/web: tests/test_export_web.py will skip"
	$(BIN)/python -m pytest -q --durations=30 tests

# The linters (ruff check, ruff format --check, clang-format), as pre-commit and
# .ci/run run them: .pre-commit-config.yaml is their one definition. They
# check git's files; `make format` applies what they would fix.
lint: install
	@$(BIN)/pre-commit run --all-files

# the files of .pre-commit-config.yaml's clang-format hook (change both)
CLANG_FORMAT_FILES = git ls-files 'native_cuda/*.cu' 'native_cuda/*.cuh' 'shaders/*.comp' 'shaders/*.glsl'

format: install
	$(BIN)/ruff check --fix-only -q .
	$(BIN)/ruff format -q .
	$(CLANG_FORMAT_FILES) | xargs $(BIN)/clang-format -i

bench: install
	$(BIN)/python -m pytest benchmarks/ --benchmark-only

clean:
	rm -rf $(VENV) .venv-blender .cache build dist
