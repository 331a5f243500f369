"""A minimal patch for setup.py files that hard-code their nvcc -gencode list.

causal-conv1d 1.7.0 and mamba-ssm 2.3.2.post1 append nine literal `-gencode arch=compute_NN,code=sm_NN`
pairs (sm_75 .. sm_121) to `cc_flag`. torch's cpp_extension then adds no arch flags of its own (it
sees 'arch' in the flags), so TORCH_CUDA_ARCH_LIST is ignored and every build compiles nine archs.
The patch keeps the file as it is and adds two lines after that block: drop the literal gencodes,
add the requested ones. Its unified diff and sha256 go into the wheel report and the cache key.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from envbuilder.kernels.archs import ArchList

# cc_flag.append("arch=compute_90,code=sm_90") (any list name, single or double quotes)
_LITERAL_GENCODE = re.compile(r"""^(\s*)(\w+)\.append\(\s*["']arch=compute_\d+a?,code=sm_\d+a?["']\s*\)\s*$""")
MARK = "envbuilder --arch-list"


@dataclass(frozen=True)
class GencodePatch:
    file: str        # path inside the unpacked sdist
    diff: str        # unified diff, a/ b/ prefixes
    sha256: str      # of the diff text
    removed: tuple[str, ...]  # the literal gencodes the file had

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "sha256": self.sha256, "removed": list(self.removed), "diff": self.diff}


def hardcoded_gencodes(text: str) -> list[str]:
    return re.findall(r"""\.append\(\s*["'](arch=compute_\d+a?,code=sm_\d+a?)["']\s*\)""", text)


def patch_text(text: str, archs: ArchList) -> tuple[str, list[str]] | None:
    """The patched setup.py text and the literal gencodes it had; None when it has none."""
    lines = text.splitlines(keepends=True)
    hits = [(i, m) for i, line in enumerate(lines) if (m := _LITERAL_GENCODE.match(line.rstrip("\n")))]
    if not hits:
        return None
    if MARK in text:
        raise ValueError("setup.py is already patched by envbuilder")
    names = {m.group(2) for _, m in hits}
    if len(names) != 1:
        return None  # literal gencodes go to several lists: not the shape this patch knows
    var = names.pop()
    last = hits[-1][0]
    # the block's outermost indentation: gencodes sit in nested `if bare_metal_version >= ...:` blocks
    # (causal-conv1d 1.6.1, mamba-ssm 2.3.1), and lines added inside the last one would run only when its
    # condition holds; each literal's `-gencode` append sits on the line before it
    indent = min((re.match(r"\s*", lines[j]).group(0)  # type: ignore[union-attr]
                  for i, _ in hits for j in (i - 1, i) if j >= 0 and f"{var}.append" in lines[j]), key=len)
    new_flags = []
    for g in archs.gencodes():
        new_flags += ["-gencode", g]
    added = [
        f"{indent}# {MARK} {archs.torch}: the literal gencodes above are replaced by the requested ones\n",
        f'{indent}{var} = [f for f in {var} if f != "-gencode" and not f.startswith("arch=compute_")]\n',
        f"{indent}{var} += {new_flags!r}\n",
    ]
    out = "".join(lines[: last + 1] + added + lines[last + 1:])
    try:
        compile(out, "setup.py", "exec")
    except SyntaxError as exc:  # e.g. an `else:` right after the block: this shape is not one the patch knows
        raise ValueError(f"the gencode patch would break setup.py ({exc.msg}, line {exc.lineno})") from exc
    return out, [g for _, m in hits for g in hardcoded_gencodes(m.group(0))]


def patch_sdist_tree(root: Path, archs: ArchList) -> GencodePatch | None:
    """Patch root/setup.py in place when it hard-codes gencodes; None when it does not."""
    setup = root / "setup.py"
    if not setup.is_file():
        return None
    before = setup.read_text(encoding="utf-8")
    result = patch_text(before, archs)
    if result is None:
        return None
    after, removed = result
    diff = "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile="a/setup.py", tofile="b/setup.py", n=2))
    setup.write_text(after, encoding="utf-8")
    return GencodePatch("setup.py", diff, hashlib.sha256(diff.encode()).hexdigest(), tuple(removed))
