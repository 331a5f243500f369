"""matrices/images.toml: the base images `envbuilder build` uses per CUDA minor, schema-checked here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envbuilder.errors import MatrixFileError
from envbuilder.matrix.load import _File, _schema_check
from envbuilder.paths import matrices_dir

UNKNOWN = "unknown"
TEST_BASE_DEFAULT = "envbuilder/test-base:bookworm"


@dataclass(frozen=True)
class ImageRef:
    value: str  # repository:tag
    digest: str  # "sha256:..." once someone verified it, else "unknown"
    source: str

    @property
    def pinned(self) -> str:
        """tag@digest when the digest is known, else the tag."""
        return f"{self.value}@{self.digest}" if self.digest.startswith("sha256:") else self.value

    @property
    def digest_known(self) -> bool:
        return self.digest.startswith("sha256:")


@dataclass(frozen=True)
class CudaImages:
    cuda: str
    builder: ImageRef
    runtime: ImageRef
    python: str  # what the image ships ("none": uv installs the lock's Python)


@dataclass(frozen=True)
class ImageTable:
    default_cuda: str
    test_base: str
    cuda: tuple[CudaImages, ...]

    def for_cuda(self, cuda: str) -> CudaImages | None:
        return next((c for c in self.cuda if c.cuda == cuda), None)


def _ref(f: _File, i: int, row: dict[str, object], key: str) -> ImageRef:
    raw = row.get(key)
    if not isinstance(raw, dict) or not raw.get("value") or not raw.get("source"):
        raise f.error("cuda", i, key, "must be { value = IMAGE:TAG, digest = ..., source = ... }",
                      "cite where the tag comes from; digest \"unknown\" until verified")
    digest = str(raw.get("digest", UNKNOWN))
    if digest != UNKNOWN and not digest.startswith("sha256:"):
        raise f.error("cuda", i, key, f"digest {digest!r} is neither sha256:... nor unknown", "fix the digest")
    return ImageRef(str(raw["value"]), digest, str(raw["source"]))


def load_images(path: Path | None = None) -> ImageTable:
    f = _File(Path(path) if path else matrices_dir() / "images.toml")
    _schema_check(f)
    entries = []
    for i, row in enumerate(f.rows("cuda")):
        cuda = str(row.get("cuda", ""))
        if not cuda:
            raise f.error("cuda", i, None, "missing 'cuda'", 'add cuda = "12.8"')
        entries.append(CudaImages(cuda, _ref(f, i, row, "builder"), _ref(f, i, row, "runtime"),
                                  str(row.get("python", "none"))))
    tb = f.data.get("test_base", {})
    test_base = str(tb.get("value", TEST_BASE_DEFAULT)) if isinstance(tb, dict) else TEST_BASE_DEFAULT
    default = str(f.data.get("default_cuda", ""))
    if default and not any(e.cuda == default for e in entries):
        raise MatrixFileError(f"images.toml: default_cuda {default} has no [[cuda]] entry", "fix matrices/images.toml")
    return ImageTable(default, test_base, tuple(entries))
