"""Every failure envbuilder reports, one class each, with its own exit code.

A user sees one line of cause and one line of fix, never a traceback. Exit codes
are grouped in bands so scripts can tell "my input was wrong" from "the network
failed" without parsing text. Each band is a `# --- A-B: title` section below, and
tests/test_errors.py checks that this table, the sections and the classes agree:

    10-19    matrix, resolve, lock
    20-29    host detection, check-parallel
    30-39    image build
    40-49    export, inspect, paths
    50-59    certify
    60-69    kernels, wheelhouse, bundle, install
    70       internal error (a bug)
    71-79    reliability: output directories, concurrency, disk, files
    80-89    matrix data, refresh, prebuilt wheels
    90-99    nightly: signing, report, regression gate, audit
    100-109  runtimes and artifact checks
    110-119  caches, performance paths, lock --all
    120-129  schemas and input limits
    130      interrupted (128 + the signal: 143 SIGTERM, 129 SIGHUP)

Retired codes (never given to another class, so old scripts are not misled):
42 was export's "disk full" before the one full-disk error, DiskFullError (74).

Every OSError that reaches a command's outermost layer goes through `os_error`,
the one mapping from errno to a typed error (a full disk, a read-only
filesystem, a denied permission, a path that cannot be used): an environment
problem is never reported as an internal error.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any, ClassVar


class EnvbuilderError(Exception):
    """Base class: a cause (one line) and a suggested fix (one line)."""

    exit_code: ClassVar[int] = 1
    #: short machine-readable name used in --json output
    kind: ClassVar[str] = "error"

    def __init__(self, cause: str, fix: str | None = None, **details: Any) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "error": self.kind,
            "exit_code": self.exit_code,
            "cause": self.cause,
            "fix": self.fix,
        }
        if self.details:
            out["details"] = self.details
        return out


# --- 10-19: matrix, resolve, lock -------------------------------------------------


class UnknownTagError(EnvbuilderError):
    """The --nemo tag is not a row of the matrix."""

    exit_code = 10
    kind = "unknown-tag"


class MatrixFileError(EnvbuilderError):
    """A matrix TOML file is malformed or fails the schema (file, line, field)."""

    exit_code = 11
    kind = "matrix-file"


class ResolveConflictError(EnvbuilderError):
    """Two constraints cannot both hold; the message names both sides and a fix."""

    exit_code = 12
    kind = "conflict"


class UnknownPackageError(EnvbuilderError):
    """A --set names a package the matrix does not manage."""

    exit_code = 13
    kind = "unknown-package"


class UvError(EnvbuilderError):
    """`uv lock` (or another uv call) failed for a reason other than the network."""

    exit_code = 14
    kind = "uv-failed"


class NetworkError(EnvbuilderError):
    """A package index or git host could not be reached."""

    exit_code = 15
    kind = "network"


class LockOutOfDateError(EnvbuilderError):
    """`lock --check`: the lock directory would change."""

    exit_code = 16
    kind = "lock-out-of-date"


class PlatformWheelError(EnvbuilderError):
    """A locked package has no installable file for the target platform and no known fix."""

    exit_code = 17
    kind = "no-wheel-for-target"


class InvalidOptionError(EnvbuilderError):
    """An option value is malformed (bad version, bad --set syntax, bad path)."""

    exit_code = 18
    kind = "invalid-option"


class LockDirError(EnvbuilderError):
    """A lock directory is missing files, or its record does not match its contents."""

    exit_code = 19
    kind = "lock-dir"


# --- 20-29: host detection, check-parallel ----------------------------------------


class ParallelLayoutError(EnvbuilderError):
    """check-parallel: the layout breaks at least one rule and cannot run."""

    exit_code = 21
    kind = "parallel-layout"


class InvalidLayoutInputError(EnvbuilderError):
    """check-parallel: impossible input values (0 GPUs, negative sizes)."""

    exit_code = 22
    kind = "invalid-layout-input"


class UnknownRecipeError(EnvbuilderError):
    """check-parallel: --from-nemo-recipe names no built-in recipe."""

    exit_code = 23
    kind = "unknown-recipe"


class UnknownGpuError(EnvbuilderError):
    """doctor / check-parallel: --gpu names no GPU in matrices/gpus.toml."""

    exit_code = 24
    kind = "unknown-gpu"


# --- 30-39: image build -------------------------------------------------------------


class DockerUnavailableError(EnvbuilderError):
    """No Docker daemon answers."""

    exit_code = 30
    kind = "docker-unavailable"


class BaseImageMissingError(EnvbuilderError):
    """The base image is neither local nor pullable."""

    exit_code = 31
    kind = "base-image-missing"


class BuildFailedError(EnvbuilderError):
    """A Dockerfile step failed; details carry the step and the log tail."""

    exit_code = 32
    kind = "build-failed"


class SecretSpecError(EnvbuilderError):
    """A --secret or --ca-bundle value is malformed or unreadable."""

    exit_code = 33
    kind = "secret-spec"


class SecretLeakError(EnvbuilderError):
    """A secret value was found inside an image layer."""

    exit_code = 34
    kind = "secret-leak"


class RegistryPushError(EnvbuilderError):
    """`build --push` / `push` / `export REGISTRY/NAME`: the registry cannot be reached or written, its TLS
    certificate is not trusted, or the engine's record disagrees with the digest it reported."""

    exit_code = 35
    kind = "registry-push-failed"


class RegistryAuthError(EnvbuilderError):
    """The registry refused the credentials of the engine's Docker config (or there were none)."""

    exit_code = 36
    kind = "registry-auth"


# --- 40-49: export, inspect, paths ----------------------------------------------------


class ImageNotFoundError(EnvbuilderError):
    """export: the image is not in the local engine."""

    exit_code = 40
    kind = "image-not-found"


class OutputPathError(EnvbuilderError):
    """A path cannot be used: missing, not a directory, a directory, already there, or a name too long."""

    exit_code = 41
    kind = "output-path"


class ExportInterruptedError(EnvbuilderError):
    """The export was interrupted; the partial file was removed."""

    exit_code = 43
    kind = "export-interrupted"


class ArtifactCorruptError(EnvbuilderError):
    """inspect: the file is truncated or fails structural checks."""

    exit_code = 44
    kind = "artifact-corrupt"


class UnsafeNameError(EnvbuilderError):
    """export: a name written into a generated script or definition file (the output's name, the training
    script, a label value) has a control character, which could end a line and start a command there."""

    exit_code = 47
    kind = "unsafe-name"


class ToolMissingError(EnvbuilderError):
    """A required external tool (mksquashfs, unsquashfs, apptainer...) is not on PATH."""

    exit_code = 45
    kind = "tool-missing"


class SquashfsToolError(EnvbuilderError):
    """export: mksquashfs failed for a reason it printed (or did not): not a full disk, not a missing tool."""

    exit_code = 46
    kind = "mksquashfs-failed"


# --- 50-59: certify -------------------------------------------------------------


class CertificationFailedError(EnvbuilderError):
    """At least one certification check failed."""

    exit_code = 50
    kind = "certification-failed"


class CertificateMismatchError(EnvbuilderError):
    """verify-cert: the certificate belongs to another lock or artifact, or is altered."""

    exit_code = 51
    kind = "certificate-mismatch"


class CertifyEnvironmentError(EnvbuilderError):
    """certify: the target environment cannot be started (no GPUs, runtime missing)."""

    exit_code = 52
    kind = "certify-environment"


# --- 60-69: kernels, wheelhouse, bundle, install -----------------------------


class KernelBuildError(EnvbuilderError):
    """wheels: a stage-2 package's wheel build failed; details carry the log tail."""

    exit_code = 60
    kind = "kernel-build-failed"


class ArchMismatchError(EnvbuilderError):
    """wheels: a built .so holds other GPU architectures than --arch-list asked for."""

    exit_code = 61
    kind = "arch-mismatch"


class NoCudaSourcesError(EnvbuilderError):
    """wheels: a stage-2 pin's sdist ships no CUDA sources, so its wheel would have no kernels."""

    exit_code = 62
    kind = "no-cuda-sources"


class BuildTorchError(EnvbuilderError):
    """wheels / lock --mode host-torch: the interpreter to build against has no usable torch."""

    exit_code = 63
    kind = "build-torch"


class CudaToolkitError(EnvbuilderError):
    """wheels: no nvcc / cuobjdump to compile or check CUDA code."""

    exit_code = 64
    kind = "cuda-toolkit"


class HashMismatchError(EnvbuilderError):
    """bundle / install: a file or part does not have the sha256 its manifest or uv.lock names; --cache: a wheel
    a shared cache served is not the bytes its signed entry names (a tampered or damaged blob)."""

    exit_code = 65
    kind = "hash-mismatch"


class BundlePartMissingError(EnvbuilderError):
    """install: a part of a split bundle (or a file of the bundle) is missing."""

    exit_code = 66
    kind = "bundle-part-missing"


class BundleInvalidError(EnvbuilderError):
    """install: the path is not an envbuilder bundle, or its manifest is unreadable."""

    exit_code = 67
    kind = "bundle-invalid"


class OfflineInstallError(EnvbuilderError):
    """install: uv could not install the bundle offline; nothing was installed."""

    exit_code = 68
    kind = "offline-install-failed"


class HostTorchMismatchError(EnvbuilderError):
    """install / wheels of a --mode host-torch lock: the interpreter's torch is not the one the lock recorded."""

    exit_code = 69
    kind = "host-torch-mismatch"


# --- 71-79: reliability: output directories, concurrency, disk, files ---------


class OutputBusyError(EnvbuilderError):
    """Another envbuilder run holds this output directory's lock (and --no-wait was given)."""

    exit_code = 71
    kind = "output-busy"


class ForeignOutputDirError(EnvbuilderError):
    """-o names a non-empty directory that envbuilder did not make: it would not be ours to replace."""

    exit_code = 72
    kind = "output-not-ours"


class MalformedFileError(EnvbuilderError):
    """A file envbuilder reads (lock record, uv.lock, certificate, expectations) fails its schema."""

    exit_code = 73
    kind = "malformed-file"


class DiskFullError(EnvbuilderError):
    """A filesystem filled up (ENOSPC) or a quota was reached (EDQUOT); the previous outputs were kept."""

    exit_code = 74
    kind = "disk-full"


class UnsupportedArchError(EnvbuilderError):
    """--sm names no real compute capability, or one the CUDA release cannot compile for."""

    exit_code = 75
    kind = "unsupported-arch"


class OutputWriteError(EnvbuilderError):
    """Writing an output failed for another reason than space, permission or a read-only filesystem (/proc, EIO)."""

    exit_code = 76
    kind = "output-write"


class PermissionDeniedError(EnvbuilderError):
    """A file or directory may not be read or written by this user (EACCES, EPERM)."""

    exit_code = 77
    kind = "permission-denied"


class ReadOnlyFilesystemError(EnvbuilderError):
    """An output lies on a read-only filesystem (EROFS)."""

    exit_code = 78
    kind = "read-only-filesystem"


class InputReadError(EnvbuilderError):
    """An input file exists but reading it failed (EIO, a device, a vanished mount)."""

    exit_code = 79
    kind = "input-read"


# --- 80-89: matrix data, refresh, prebuilt wheels ----------------------------


class SdistFetchError(EnvbuilderError):
    """A stage-2 sdist could not be downloaded or did not match the lock's hash."""

    exit_code = 81
    kind = "sdist-fetch"


class SourceBuildRefusedError(EnvbuilderError):
    """--no-source-build, and a stage-2 package has no prebuilt wheel for the chosen torch."""

    exit_code = 82
    kind = "source-build-refused"


class MatrixBehindError(EnvbuilderError):
    """`matrix refresh`: upstream has releases newer than the matrix."""

    exit_code = 83
    kind = "matrix-behind"


class SnapshotFileError(EnvbuilderError):
    """`matrix refresh --snapshot`: the snapshot file is not the {"packages": {name: {version: time}}} it must be."""

    exit_code = 84
    kind = "snapshot-file"


class ReleaseArtifactError(EnvbuilderError):
    """`matrix derive`: a file of the release is missing or malformed (the error names the file and field)."""

    exit_code = 86
    kind = "release-artifact"


class ReleaseSourceError(EnvbuilderError):
    """`matrix derive`: the release cannot be read at all (no such tag, not a clone, mirror or source
    archive, or the clone of a git URL failed)."""

    exit_code = 87
    kind = "release-source"


# --- 90-99: nightly: signing, report, regression gate, audit -----------------


class SigningKeyError(EnvbuilderError):
    """A signing or verification key is missing, unreadable, not ed25519, or would be overwritten."""

    exit_code = 90
    kind = "signing-key"


class SignatureInvalidError(EnvbuilderError):
    """verify-cert --key: the DSSE envelope's signature, key or statement does not match the certificate."""

    exit_code = 91
    kind = "signature-invalid"


class CertificateUnsignedError(EnvbuilderError):
    """verify-cert --key: the certificate has no DSSE envelope beside it."""

    exit_code = 92
    kind = "certificate-unsigned"


class ReportInputError(EnvbuilderError):
    """report: no certificate found, or a certificate or history file cannot be read."""

    exit_code = 93
    kind = "report-input"


class RegressionError(EnvbuilderError):
    """report --gate: tokens/s, GEMM TFLOP/s or NCCL bus bandwidth dropped more than the threshold."""

    exit_code = 94
    kind = "regression"


class SbomError(EnvbuilderError):
    """sbom: uv export or the image's package list failed."""

    exit_code = 95
    kind = "sbom"


class DashboardBrowserError(EnvbuilderError):
    """report --browser-check: a page logged console messages or links to a missing file in Chromium."""

    exit_code = 97
    kind = "dashboard-browser"


class NightlyRowsFailedError(EnvbuilderError):
    """nightly: at least one row did not certify (each row's step and cause are in the summary)."""

    exit_code = 96
    kind = "nightly-rows-failed"


class VulnerabilitiesFoundError(EnvbuilderError):
    """audit: at least one locked package has a known vulnerability at or above the --fail-on severity."""

    exit_code = 98
    kind = "vulnerabilities-found"


class AuditDatabaseError(EnvbuilderError):
    """audit: the OSV database (--db file, the OSV service's answer, or an audit report) is unreadable or malformed."""

    exit_code = 99
    kind = "audit-database"


# --- 100-109: runtimes and artifact checks ----------------------------------


class ArtifactImageMismatchError(EnvbuilderError):
    """export / inspect --deep: a path or symlink in the artifact is not as in the image."""

    exit_code = 100
    kind = "artifact-image-mismatch"


class RuntimeCommandError(EnvbuilderError):
    """A container runtime (apptainer, enroot) that envbuilder ran failed; its output is shown."""

    exit_code = 101
    kind = "runtime-failed"


# --- 110-119: caches, performance paths, lock --all --------------------------


class LockAllError(EnvbuilderError):
    """`lock --all`: one or more rows failed; the others were written."""

    exit_code = 110
    kind = "lock-all-failed"


class LayerStorageUnreadableError(EnvbuilderError):
    """`export --layers storage`: the engine's layer directories cannot be read from here."""

    exit_code = 111
    kind = "layer-storage-unreadable"


class OverlayFeedError(EnvbuilderError):
    """`export --feed mount`: the layers cannot be mounted as one directory here."""

    exit_code = 112
    kind = "overlay-feed-refused"


class WheelCacheUnsignedError(EnvbuilderError):
    """--cache: an entry of the shared wheel cache has no signature (and --trust-unsigned was not given)."""

    exit_code = 113
    kind = "wheel-cache-unsigned"


class WheelCacheSignatureError(EnvbuilderError):
    """--cache: an entry's signature is by no trusted key, or its signed statement is not the entry asked for."""

    exit_code = 114
    kind = "wheel-cache-signature"


class WheelCacheAuthError(EnvbuilderError):
    """--cache / --publish: the registry refused the credentials (or asked for some and none were given)."""

    exit_code = 115
    kind = "wheel-cache-auth"


class WheelCacheUnreachableError(EnvbuilderError):
    """--publish: the shared wheel cache cannot be reached (a reader falls back to building and says so)."""

    exit_code = 116
    kind = "wheel-cache-unreachable"


class WheelCachePublishError(EnvbuilderError):
    """--publish: an upload failed or was cut off, or the cache is read-only; no entry was written."""

    exit_code = 117
    kind = "wheel-cache-publish"



class GitSourceUnavailableError(EnvbuilderError):
    """A stage-2 source the lock builds from a git tag could be had from no mirror, cache or network."""

    exit_code = 118
    kind = "git-source-unavailable"


class GitSourceMismatchError(EnvbuilderError):
    """The files had for a git-tag source do not recompute to the tree the lock records (or lack kernels)."""

    exit_code = 119
    kind = "git-source-mismatch"


# --- 120-129: schemas and input limits ---------------------------------------


class LockSchemaError(EnvbuilderError):
    """A lock record (envbuilder.lock.json) has a schema version or fields this envbuilder does not read."""

    exit_code = 120
    kind = "lock-schema"


class InputTooLargeError(EnvbuilderError):
    """A file envbuilder reads is larger than its kind may be (or endless, like /dev/zero); it was not read whole."""

    exit_code = 121
    kind = "input-too-large"


class InputTooDeepError(EnvbuilderError):
    """A JSON file envbuilder reads nests deeper than its kind may."""

    exit_code = 122
    kind = "input-too-deep"


class WheelStubError(EnvbuilderError):
    """The lock pins a release PyPI serves only as a wheel-stub sdist: building it downloads the real wheel
    from another index, online and unhashed, so no bundle can carry it (matrices/pypi_stubs.toml)."""

    exit_code = 123
    kind = "wheel-stub"


# --- 70: internal error (a bug) -------------------------------------------------------------


class InternalError(EnvbuilderError):
    """A bug in envbuilder: anything not anticipated above."""

    exit_code = 70
    kind = "internal"


# --- the one mapping from OSError to a typed error ----------------------------------

#: a full disk or quota
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
#: the path itself cannot be used, whatever the filesystem
_PATH = {errno.EEXIST, errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENOTEMPTY}


#: envbuilder's own temporary names beside an output: .NAME.{staging,bundle,work,probe}.X/..., .NAME.X.tmp
_TEMP_NAMES = re.compile(r"/\.([^/]+?)\.(?:staging|bundle|work|probe)\.[^/]+(?:/.*)?$|/\.([^/]+?)\.[^/.]+\.tmp$")


def _user_path(name: str) -> str:
    """The output the user named, where an OSError names one of envbuilder's temporary files beside it."""
    m = _TEMP_NAMES.search(name)
    return name if m is None else name[:m.start()] + "/" + (m.group(1) or m.group(2))


def os_error(exc: OSError, path: os.PathLike[str] | str | None = None, *, action: str = "write",
             flag: str | None = None) -> EnvbuilderError:
    """The typed error for an OSError: the one mapping every command's outermost layer uses.

    `path` defaults to the one the OSError names; `action` is what was being done ("write",
    "read", "create", "open", ...), `flag` the option that named the path (its fix names it).
    """
    code = exc.errno
    named = exc.filename if exc.filename not in (None, "") else None
    if exc.filename2 not in (None, "") and code in (*_FULL, errno.EROFS):
        named = exc.filename2  # a copy or link: the destination is the filesystem that failed
    named = _user_path(str(named)) if named is not None else None
    # the file the OSError names is the one that failed (pyproject.toml, not the lock directory holding it);
    # a full disk is reported for the directory the caller names (the filesystem is what matters)
    where = str(path if path is not None and (code in _FULL or named is None) else (named or ""))
    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else "") or str(exc) or type(exc).__name__
    target = f"{action} {where}" if where else f"{action} a file"
    other = f"pass another {flag}" if flag else "choose another path"
    reading = action in ("read", "list")
    if code in _FULL:
        fs = f"the filesystem of {where}" if where else "a filesystem"
        doing = "" if action == "use" else f" while trying to {action}"
        return DiskFullError(f"{fs} is full ({reason}){doing}",
                             f"free space (or quota) there, or {other} on a bigger disk; "
                             "the previous outputs were kept")
    if code == errno.EROFS:
        return ReadOnlyFilesystemError(f"cannot {target}: it is on a read-only filesystem",
                                       f"{other} on a writable filesystem")
    if code in (errno.EACCES, errno.EPERM):
        return PermissionDeniedError(f"cannot {target}: permission denied",
                                     f"give this user access to {where or 'it'} (ls -ld; chmod), or {other}")
    if code in _PATH or (code == errno.ENOENT and reading):
        return OutputPathError(f"cannot {target}: {reason}",
                               "pass a shorter path" if code == errno.ENAMETOOLONG else f"check the path, or {other}")
    if reading:
        return InputReadError(f"cannot {target}: {reason}",
                              "check the file and its filesystem (dmesg), or pass another file")
    return OutputWriteError(f"cannot {target}: {reason}", f"{other} on an ordinary writable filesystem")


def all_error_classes() -> list[type[EnvbuilderError]]:
    """Every concrete error class (used by a test that keeps exit codes distinct)."""
    seen: list[type[EnvbuilderError]] = []
    stack: list[type[EnvbuilderError]] = list(EnvbuilderError.__subclasses__())
    while stack:
        cls = stack.pop()
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return sorted(seen, key=lambda c: c.exit_code)
