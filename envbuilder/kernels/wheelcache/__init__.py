"""The shared kernel-wheel cache: wheels built once anywhere in a team, pulled and verified everywhere.

    url.py        `--cache URL` / `--publish URL` parsed once (CacheUrl)
    entry.py      an entry: the wheel, signed as an in-toto statement in a DSSE envelope (envbuilder.dsse)
    transport.py  one protocol, one object per transport: a directory, a read-only HTTP(S) index
    oci.py        ... and an OCI registry (the distribution API over urllib)
    pep503.py     the directory's PEP 503 pages, so pip and uv install from it directly
    http.py, auth.py   HTTP with TLS from --ca-bundle, basic/token auth, credentials from CI or `docker login`
    shared.py     reading (verify, fall back when unreachable) and publishing, for one `wheels` run

The local content-addressed cache (kernels/cache.py) stays the first place a wheel is looked for;
the shared cache is the second, and a hit is filed in the local one once every check passed.
Import from the modules (this __init__ imports none: kernels/__init__ loads the pipeline, which loads them).
"""

