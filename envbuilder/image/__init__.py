"""Image build: render a Dockerfile from a lock directory and build it on the Docker engine.

Pipeline (one module each):
    lockdir   read and check the lock directory (envbuilder.lock.json contract)
    images    choose builder/runtime base images (matrices/images.toml, or --base)
    render    Dockerfile text from templates/Dockerfile.<mode>.j2
    context   a build context: lock files, the uv binary, the in-image tools
    secrets   --ca-bundle, --secret and proxy variables as BuildKit secrets
    engine    the Docker engine: SDK for ping/inspect/save, BuildKit CLI for the build
    buildlog  BuildKit plain progress -> steps, cache hits, failing step and log tail
    layerscan scan every layer of `docker save` for secret values
    baseimage bootstrap the Debian test base (mmdebstrap -> docker import)
    pipeline  build_image(): the whole `envbuilder build`
"""
