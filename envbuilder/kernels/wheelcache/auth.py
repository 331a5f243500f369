"""Credentials for a registry or index host, from where CI and `docker login` keep them.

1. $ENVBUILDER_REGISTRY_USER and $ENVBUILDER_REGISTRY_PASSWORD (a CI secret): for every host;
2. Docker's client configuration ($DOCKER_CONFIG/config.json, else ~/.docker/config.json):
   `credHelpers[host]`, then `auths[host]` (`auth`: base64 of user:password, or `username`/`password`),
   then `credsStore` — a helper is run as `docker-credential-NAME get` with the host on stdin.

Nothing here is ever printed: errors name the user and where the credentials came from, never the secret.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from envbuilder import procs
from envbuilder.errors import EnvbuilderError, WheelCacheAuthError

USER_ENV = "ENVBUILDER_REGISTRY_USER"
PASSWORD_ENV = "ENVBUILDER_REGISTRY_PASSWORD"


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str                     # where they came from, for messages

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def docker_config_path() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return (Path(base) if base else Path.home() / ".docker") / "config.json"


def credentials_for(host: str) -> Credentials | None:
    user, password = os.environ.get(USER_ENV, ""), os.environ.get(PASSWORD_ENV, "")
    if user and password:
        return Credentials(user, password, f"${USER_ENV}")
    if user or password:
        raise WheelCacheAuthError(f"only one of ${USER_ENV} and ${PASSWORD_ENV} is set",
                                  "set both (or neither, to use `docker login`)")
    return _from_docker_config(host, docker_config_path())


def _from_docker_config(host: str, path: Path) -> Credentials | None:
    from envbuilder.jsonread import read_object

    if not path.is_file():
        return None
    fix = f"repair {path} (or run `docker login {host}` again)"
    where = f"docker config {path}"
    try:
        doc = read_object(path, what="docker config", error=WheelCacheAuthError, fix=fix, max_bytes=1 << 20)
        helpers = doc.obj("credHelpers", None)
        if helpers is not None and host in helpers:
            return _from_helper(helpers.string(host, plain=True), host)
        auths = doc.obj("auths", None)
        for name in (host, f"https://{host}", f"http://{host}", f"https://{host}/v2/", f"https://{host}/v1/"):
            if auths is not None and name in auths:
                entry = auths.obj(name)
                if entry.string("auth", None):
                    try:
                        user, _, password = base64.b64decode(entry.string("auth"), validate=True).decode() \
                            .partition(":")
                    except (binascii.Error, UnicodeDecodeError) as exc:
                        raise WheelCacheAuthError(f"{where}: auths[{name!r}].auth is not base64 of user:password",
                                                  fix) from exc
                    return Credentials(user, password, where)
                if entry.string("username", None) and entry.string("password", None):
                    return Credentials(entry.string("username"), entry.string("password"), where)
        store = doc.string("credsStore", None, plain=True)
    except EnvbuilderError as exc:
        if isinstance(exc, WheelCacheAuthError):
            raise
        raise WheelCacheAuthError(f"{where} cannot be read: {exc.cause}", fix) from exc
    return _from_helper(store, host) if store else None


def _from_helper(name: str, host: str) -> Credentials | None:
    import json

    tool = shutil.which(f"docker-credential-{name}")
    if tool is None:
        raise WheelCacheAuthError(f"the docker config names the credential helper {name!r}, which is not installed",
                                  f"install docker-credential-{name}, or set ENVBUILDER_REGISTRY_USER/PASSWORD")
    proc = procs.run([tool, "get"], input=host, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        if "credentials not found" in (proc.stdout + proc.stderr).lower():
            return None
        raise WheelCacheAuthError(f"docker-credential-{name} get {host} failed (exit {proc.returncode})",
                                  f"run `docker login {host}`")
    try:
        answer = json.loads(proc.stdout)
        return Credentials(str(answer["Username"]), str(answer["Secret"]), f"docker-credential-{name}")
    except (ValueError, KeyError, TypeError) as exc:
        raise WheelCacheAuthError(f"docker-credential-{name} answered something other than credentials",
                                  f"run `docker login {host}`") from exc
