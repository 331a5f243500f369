# envbuilder hermetic image: a builder stage (stage 1 wheels, stage 2 compiled sdists,
# import check) and a slim runtime stage that receives only the virtualenv.
# Rendered from templates/Dockerfile.hermetic.j2 by envbuilder; do not edit by hand.
# Needs BuildKit (Docker >= 20.10: DOCKER_BUILDKIT=1) for cache and secret mounts.
#
# Build context layout: ${LOCKDIR}/ (pyproject.toml, uv.lock, optional wheels/ of a lock
# directory), ${LOCKDIR}/envbuilder.lock.json (its record), .venv/bin/uv (the uv binary that
# made the lock), envbuilder/image/tools/ (envbuilder's in-image helpers).
ARG BUILDER_BASE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04
ARG RUNTIME_BASE=nvidia/cuda:12.8.1-runtime-ubuntu24.04

FROM ${BUILDER_BASE} AS stage1
# PYTHON: the lock's target Python. PYTHON_FROM=system uses the base's interpreter
# (python$PYTHON on PATH); PYTHON_FROM=uv installs that exact version with uv into
# /opt/python, which the runtime stage copies (CUDA images ship no Python).
ARG PYTHON=3.12
ARG PYTHON_FROM=uv
ARG SOURCE_DATE_EPOCH
# UV_COMPILE_BYTECODE: the venv ships .pyc files (hash-checked, hence reproducible, because
# SOURCE_DATE_EPOCH is set), so `import torch` does not recompile thousands of modules in every
# process of a read-only container (enroot/Apptainer squashfs).
ENV UV_PROJECT_ENVIRONMENT=/opt/venv \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1 \
    UV_NO_PROGRESS=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY .venv/bin/uv /usr/local/bin/uv
COPY envbuilder/image/tools/ /opt/envbuilder/tools/
COPY envbuilder/kernels/gittree.py /opt/envbuilder/tools/gittree.py
# A C/C++ toolchain for sdists (stage 1 has a few, e.g. cdifflib; stage 2 needs g++ beside nvcc),
# plus the Python headers when the base's own Python is used: installed from the base's apt when
# missing. Builder only; the runtime never sees them.
RUN --mount=type=cache,target=/root/.cache/uv,id=envbuilder-uv,sharing=shared \
    --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi \
    && dev=""; if [ "$PYTHON_FROM" = system ] && [ ! -e "/usr/include/python$PYTHON/Python.h" ]; then \
         dev="python$PYTHON-dev"; fi \
    && if command -v apt-get >/dev/null && { ! command -v g++ >/dev/null || [ -n "$dev" ]; }; then \
         apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           build-essential $dev >/dev/null && rm -rf /var/lib/apt/lists/*; fi \
    && mkdir -p /opt/python \
    && if [ "$PYTHON_FROM" = uv ]; then uv python install --no-bin "$PYTHON"; fi

WORKDIR /opt/envbuilder/lock
# Only the lock files enter here, so an unrelated change never invalidates the venv.
ARG LOCKDIR=build/v2.3.0
COPY ${LOCKDIR}/ ./

# Stage 1: wheels only (torch and everything pure), exactly as locked.
RUN --mount=type=cache,target=/root/.cache/uv,id=envbuilder-uv,sharing=shared \
    --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi \
    && if [ "$PYTHON_FROM" = uv ]; then export UV_PYTHON_PREFERENCE=only-managed; \
       else export UV_PYTHON_PREFERENCE=only-system UV_PYTHON_DOWNLOADS=never; fi \
    && uv sync --frozen --no-install-project --python "$PYTHON"

# Stage 2: torch-importing sdists built without isolation against stage 1's torch.
# (`--target stage1` stops before it: stage 1 alone on a base without nvcc.)
FROM stage1 AS builder
# The lock record (stage2_env, provenance) enters only now: editing it never re-runs stage 1.
ARG LOCKDIR=build/v2.3.0
COPY ${LOCKDIR}/envbuilder.lock.json ./envbuilder.lock.json
# Their compiled wheels land in the uv cache mount, in a directory keyed by what they were
# compiled against (stage2_env.py --cache-key: torch, arch list, stage2_env, Python), so a
# rebuild after a pure-Python pin change installs them from the cache instead of compiling,
# and a change of torch or of the arch list compiles them again.
# A pin whose PyPI sdist ships no CUDA sources is built from its repository's tag (the record's git_sources):
# uv skips it ($ENVBUILDER_STAGE2_SKIP) and tools/git_sources.py builds the tag's files, their git tree
# recomputed first, from git-sources/ (`envbuilder build` bind-mounts it) or GitHub's archive of the commit.
ARG TORCH_CUDA_ARCH_LIST=8.0;8.6;8.9;9.0;10.0;12.0
ARG NVTE_CUDA_ARCHS=80;86;89;90;100;120
ARG MAX_JOBS=4
RUN --mount=type=cache,target=/root/.cache/uv,id=envbuilder-uv,sharing=shared \
    --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi \
    && eval "$(/opt/venv/bin/python /opt/envbuilder/tools/stage2_env.py envbuilder.lock.json)" \
    && export TORCH_CUDA_ARCH_LIST NVTE_CUDA_ARCHS MAX_JOBS \
    && export UV_CACHE_DIR="/root/.cache/uv/stage2-$(/opt/venv/bin/python /opt/envbuilder/tools/stage2_env.py --cache-key envbuilder.lock.json)" \
    && uv sync --frozen --no-install-project --extra compile $ENVBUILDER_STAGE2_SKIP \
    && /opt/venv/bin/python /opt/envbuilder/tools/git_sources.py envbuilder.lock.json /opt/envbuilder/git-sources

FROM ${RUNTIME_BASE} AS runtime
COPY --from=builder /opt/python /opt/python
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /opt/envbuilder/tools/ /opt/envbuilder/tools/
# The lock travels with the image (certify checks installed versions against it); wheels/ does not.
COPY --from=builder /opt/envbuilder/lock/pyproject.toml /opt/envbuilder/lock/uv.lock \
     /opt/envbuilder/lock/envbuilder.lock.json /opt/envbuilder/lock/
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH}
# Import check: every top-level module of every installed distribution, one subprocess each.
RUN PYTHONDONTWRITEBYTECODE=1 /opt/venv/bin/python /opt/envbuilder/tools/import_check.py
ARG SOURCE_DATE_EPOCH
ARG ENVBUILDER_CREATED
ARG ENVBUILDER_VERSION
ARG ENVBUILDER_REVISION
ARG ENVBUILDER_ROW
ARG ENVBUILDER_LOCK_SHA256
ARG ENVBUILDER_BASE
ARG TORCH_CUDA_ARCH_LIST=8.0;8.6;8.9;9.0;10.0;12.0
LABEL org.opencontainers.image.created="${ENVBUILDER_CREATED}" \
      org.opencontainers.image.version="${ENVBUILDER_ROW}" \
      org.opencontainers.image.revision="${ENVBUILDER_REVISION}" \
      org.opencontainers.image.title="envbuilder ${ENVBUILDER_ROW} (hermetic)" \
      org.opencontainers.image.base.name="${ENVBUILDER_BASE}" \
      io.envbuilder.lock-sha256="${ENVBUILDER_LOCK_SHA256}" \
      io.envbuilder.row="${ENVBUILDER_ROW}" \
      io.envbuilder.mode="hermetic" \
      io.envbuilder.version="${ENVBUILDER_VERSION}" \
      io.envbuilder.source-date-epoch="${SOURCE_DATE_EPOCH}" \
      io.envbuilder.stage="runtime" \
      io.envbuilder.arch-list="${TORCH_CUDA_ARCH_LIST:-none}"
