"""The one place a TLS context is made: `--ca-bundle`, else $SSL_CERT_FILE, else the system bundle.

A TLS-intercepting proxy, a site registry with its own CA, or the test CA of the wheel-cache tests
all come in through `--ca-bundle`. `ssl` is imported when a context is made: it costs start-up time
and most commands never open a connection.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl


def ca_file(ca_bundle: Path | None) -> str | None:
    """The CA file a context trusts: the option, else SSL_CERT_FILE when it exists, else None (the system's)."""
    cafile = str(ca_bundle) if ca_bundle else os.environ.get("SSL_CERT_FILE")
    return cafile if cafile and Path(cafile).exists() else None


def ssl_context(ca_bundle: Path | None = None) -> ssl.SSLContext:
    import ssl

    return ssl.create_default_context(cafile=ca_file(ca_bundle))
