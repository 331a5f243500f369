"""The shared wheel cache in an OCI registry, spoken over the distribution API (urllib, no client library).

Each entry is an OCI artifact (image-spec 1.1) tagged with its cache key in the cache's repository:

    manifest  artifactType application/vnd.envbuilder.wheel.v1, config the empty descriptor
    layers    the wheel (application/vnd.envbuilder.wheel.v1+zip, titled with its file name)
              the signed entry (application/vnd.dsse.envelope.v1+json)

Blobs are stored by digest, and a wheel's digest is its sha256, the one its signed entry names.
Publishing uploads the blobs (each skipped when the registry has it) and PUTs the manifest last: an
upload cut off midway never becomes an entry, and two publishers of one key each PUT a whole
manifest (the last tag wins). Reading GETs the manifest, the envelope (checked against its
digest) and the wheel by its sha256.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, ClassVar

from envbuilder.errors import (
    HashMismatchError,
    WheelCachePublishError,
    WheelCacheUnreachableError,
)
from envbuilder.kernels.wheelcache.entry import MAX_ENTRY_BYTES
from envbuilder.kernels.wheelcache.http import MAX_JSON_BYTES, HttpClient, Response, error_text
from envbuilder.kernels.wheelcache.transport import Layout, WheelRef, receive
from envbuilder.kernels.wheelcache.url import CacheUrl

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.envbuilder.wheel.v1"
WHEEL_MEDIA_TYPE = "application/vnd.envbuilder.wheel.v1+zip"
ENTRY_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
TITLE = "org.opencontainers.image.title"
KEY_ANNOTATION = "io.envbuilder.wheel-cache.key"
#: uploads of large wheels (flash-attn: ~250 MB) get longer than a metadata request
UPLOAD_TIMEOUT = 1800.0


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type: str, digest: str, size: int, title: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": size}
    if title:
        out["annotations"] = {TITLE: title}
    return out


def manifest(key: str, envelope: bytes, ref: WheelRef) -> bytes:
    """The entry's manifest: same entry, same bytes (so the same digest)."""
    doc = {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE, "artifactType": ARTIFACT_TYPE,
           "config": descriptor(EMPTY_MEDIA_TYPE, digest_of(EMPTY), len(EMPTY)),
           "layers": [descriptor(WHEEL_MEDIA_TYPE, f"sha256:{ref.sha256}", ref.size, ref.filename),
                      descriptor(ENTRY_MEDIA_TYPE, digest_of(envelope), len(envelope), f"{key}.dsse.json")],
           "annotations": {KEY_ANNOTATION: key}}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


class OciTransport:
    """oci://HOST[:PORT]/REPO (TLS; oci+http:// for a plain-HTTP registry on this host)."""

    writable: ClassVar[bool] = True

    def __init__(self, url: CacheUrl, ca_bundle: Path | None = None) -> None:
        assert url.registry is not None and url.repository is not None
        self._url = url
        self.repo = url.repository
        self.client = HttpClient(f"{'https' if url.tls else 'http'}://{url.registry}", ca_bundle, "the registry")
        self._scope: str | None = None

    @property
    def url(self) -> CacheUrl:
        return self._url

    # --- reading -------------------------------------------------------------------------------------------

    def manifest(self, key: str) -> bytes | None:
        """The raw manifest tagged `key`, or None."""
        Layout.entry(key)  # a key, nothing else, becomes a tag
        self._login(push=False)
        resp = self._call("GET", f"/v2/{self.repo}/manifests/{key}", headers={"Accept": MANIFEST_MEDIA_TYPE})
        with resp.body:
            if resp.status == 404:
                return None
            if resp.status != 200:
                raise self._unexpected(resp, "reading an entry")
            return resp.read(MAX_JSON_BYTES)

    def entry(self, key: str) -> bytes | None:
        raw = self.manifest(key)
        if raw is None:
            return None
        layer = _entry_layer(raw, self._where(key))
        resp = self._call("GET", f"/v2/{self.repo}/blobs/{layer['digest']}")
        with resp.body:
            if resp.status == 404:
                return None  # a manifest whose blob was deleted: a miss
            if resp.status != 200:
                raise self._unexpected(resp, "reading an entry")
            data = resp.read(MAX_ENTRY_BYTES)
        if digest_of(data) != layer["digest"]:
            raise HashMismatchError(f"{self._where(key)}: the registry served an entry whose sha256 is not "
                                          f"its digest {layer['digest'][:19]}…",
                                          "the registry's storage was changed: republish the entry, or use "
                                          "another --cache")
        return data

    def fetch(self, ref: WheelRef, dest: Path) -> bool:
        self._login(push=False)
        resp = self._call("GET", f"/v2/{self.repo}/blobs/sha256:{ref.sha256}", timeout=UPLOAD_TIMEOUT)
        with resp.body:
            if resp.status == 404:
                return False
            if resp.status != 200:
                raise self._unexpected(resp, f"downloading {ref.filename}")
            receive(resp.body, dest, ref, f"the registry {self.url}")
        return True

    # --- publishing ----------------------------------------------------------------------------------------

    def publish(self, key: str, envelope: bytes, wheel: Path, ref: WheelRef) -> None:
        Layout.entry(key)
        self._login(push=True)
        body = manifest(key, envelope, ref)
        for attempt in range(4):
            self._upload_blobs(envelope, wheel, ref)
            resp = self._call("PUT", f"/v2/{self.repo}/manifests/{key}", data=body,
                              headers={"Content-Type": MANIFEST_MEDIA_TYPE})
            with resp.body:
                if resp.status in (200, 201):
                    return
                detail = error_text(resp)
            # another publisher committing the same blob at this moment: the registry briefly reports it unknown
            if resp.status != 400 or "blob unknown" not in detail.lower() or attempt == 3:
                raise WheelCachePublishError(f"{self.url} refused the entry of {ref.filename} "
                                             f"(HTTP {resp.status}{detail})",
                                             "check that the registry accepts OCI artifacts (image-spec 1.1 "
                                             "manifests)")
            time.sleep(0.2 * (attempt + 1))

    def _upload_blobs(self, envelope: bytes, wheel: Path, ref: WheelRef) -> None:
        try:
            with open(wheel, "rb") as fh:
                self._upload(f"sha256:{ref.sha256}", ref.size, fh, ref.filename)
            self._upload(digest_of(envelope), len(envelope), envelope, "the entry")
            self._upload(digest_of(EMPTY), len(EMPTY), EMPTY, "the empty config")
        except WheelCacheUnreachableError as exc:
            raise WheelCachePublishError(f"an upload to {self.url} was cut off ({exc.cause}); no entry was written "
                                         f"for {ref.filename}", "publish again: blobs already uploaded are kept and "
                                         "skipped, and the entry appears only once it is whole") from exc

    def _upload(self, digest: str, size: int, data: Any, what: str) -> None:
        """Monolithic blob upload (POST, then PUT ?digest=), skipped when the registry has the blob. A failed
        upload of a blob that another publisher has meanwhile stored is not a failure: blobs are content."""
        if self._has_blob(digest):
            return
        start = self._call("POST", f"/v2/{self.repo}/blobs/uploads/", data=b"")
        with start.body:
            location = start.headers.get("Location")
            if start.status != 202 or not location:
                raise WheelCachePublishError(f"{self.url} refused to start the upload of {what} "
                                             f"(HTTP {start.status}{error_text(start)})",
                                             "check the account's push rights on the repository")
        sep = "&" if "?" in location else "?"
        try:
            put = self._call("PUT", f"{location}{sep}digest={digest}", data=data, timeout=UPLOAD_TIMEOUT,
                             headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})
        except WheelCacheUnreachableError:
            if self._has_blob(digest):
                return
            raise
        with put.body:
            if put.status == 201 or self._has_blob(digest):
                return
            raise WheelCachePublishError(f"{self.url} refused the upload of {what} "
                                         f"(HTTP {put.status}{error_text(put)})",
                                         "publish again; if it persists, check the registry's logs")

    def _has_blob(self, digest: str) -> bool:
        try:
            head = self._call("HEAD", f"/v2/{self.repo}/blobs/{digest}")
        except WheelCacheUnreachableError:
            return False
        head.body.close()
        return head.status == 200

    # --- the API ---------------------------------------------------------------------------------------------

    def _login(self, push: bool) -> None:
        """Anonymous access when the registry allows it, else answer /v2/'s challenge for this repository."""
        scope = f"repository:{self.repo}:{'pull,push' if push else 'pull'}"
        if self._scope == scope or (self._scope is not None and not push):
            return
        resp = self.client.request("GET", "/v2/")
        resp.body.close()
        if resp.status == 401:
            self.client.answer_challenge(resp, scope)
            check = self.client.request("GET", "/v2/")
            check.body.close()
            if check.status in (401, 403):
                raise self.client.refused(check.status)
        elif resp.status not in (200,):
            raise WheelCacheUnreachableError(f"{self.client.host} is not an OCI registry (GET /v2/ answered HTTP "
                                             f"{resp.status})", "check the host and port in --cache")
        self._scope = scope

    def _call(self, method: str, path: str, *, data: Any = None, headers: dict[str, str] | None = None,
              timeout: float | None = None) -> Response:
        resp = self.client.request(method, path, data=data, headers=headers, timeout=timeout)
        if resp.status in (401, 403):
            resp.body.close()
            can_resend = data is None or isinstance(data, bytes)
            if resp.status == 401 and can_resend and resp.headers.get("WWW-Authenticate"):
                self.client.answer_challenge(resp, f"repository:{self.repo}:pull,push")
                resp = self.client.request(method, path, data=data, headers=headers, timeout=timeout)
                if resp.status not in (401, 403):
                    return resp
                resp.body.close()
            raise self.client.refused(resp.status)
        return resp

    def _unexpected(self, resp: Response, doing: str) -> WheelCacheUnreachableError:
        return WheelCacheUnreachableError(f"{self.url} answered HTTP {resp.status} {doing}{error_text(resp)}",
                                          "check the repository name and the registry's logs")

    def _where(self, key: str) -> str:
        return f"{self.url}:{key[:16]}…"


def _entry_layer(raw: bytes, where: str) -> dict[str, Any]:
    """The envelope's descriptor from an entry's manifest (a wheel-cache artifact, or the entry is refused)."""
    from envbuilder.errors import WheelCacheSignatureError
    from envbuilder.jsonread import Fields, loads_json

    fix = "the tag holds something other than an envbuilder wheel-cache entry: republish it, or use another --cache"
    doc = Fields.of(loads_json(raw, what=f"the manifest of {where}", error=WheelCacheSignatureError, fix=fix),
                    f"the manifest of {where}", WheelCacheSignatureError, fix)
    if doc.string("artifactType", "") != ARTIFACT_TYPE:
        raise WheelCacheSignatureError(f"{where} is not a wheel-cache entry (artifactType "
                                       f"{doc.string('artifactType', '') or 'none'})", fix)
    envelopes = [layer for layer in doc.objs("layers") if layer.string("mediaType") == ENTRY_MEDIA_TYPE]
    if len(envelopes) != 1:
        raise WheelCacheSignatureError(f"{where} has {len(envelopes)} entry layers, not one", fix)
    digest = envelopes[0].string("digest")
    if not digest.startswith("sha256:") or len(digest) != 71:
        raise WheelCacheSignatureError(f"{where}: the entry layer's digest {digest[:80]!r} is not a sha256", fix)
    return {"digest": digest, "size": envelopes[0].integer("size", min=1, max=MAX_ENTRY_BYTES)}
