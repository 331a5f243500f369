"""Parse BuildKit's `--progress=plain` output: steps, cache hits, the failing step, its log tail.

Plain progress prints, per vertex `#N`: a header `#N [stage i/n] INSTRUCTION`, output lines
`#N 12.3 text`, and a final `#N CACHED`, `#N DONE 1.2s` or `#N ERROR: message`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEADER = re.compile(r"^#(\d+) \[(?P<name>[^\]]+)\] (?P<instr>.*)$")
_INTERNAL = re.compile(r"^#(\d+) \[internal\] (?P<instr>.*)$")
_DONE = re.compile(r"^#(\d+) DONE (?P<secs>[\d.]+)s$")
_CACHED = re.compile(r"^#(\d+) CACHED$")
_ERROR = re.compile(r"^#(\d+) ERROR: (?P<msg>.*)$")
_OUTPUT = re.compile(r"^#(\d+) (?:(?P<t>\d+\.\d+) )?(?P<text>.*)$")
_SOLVE_ERROR = re.compile(r"^(error: )?failed to solve: (?P<msg>.*)$")


@dataclass
class Step:
    id: int
    name: str            # "builder 4/8", "runtime 2/6", or "internal"
    instruction: str
    status: str = "running"   # running | done | cached | error
    seconds: float | None = None
    lines: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def stage(self) -> str:
        return self.name.split()[0]

    @property
    def title(self) -> str:
        return f"[{self.name}] {self.instruction}"

    @property
    def short(self) -> str:
        """The title without mount flags and the secret-export preamble (for display)."""
        text = re.sub(r"--mount=\S+\s*", "", self.instruction)
        text = re.sub(r"if \[ -s /run/secrets/ca \].*?fi\s*(&&\s*)?", "", text)
        text = re.sub(r"&& export \w+=\"\$\(cat /run/secrets/\w+\)\"\s*", "", text)
        text = re.sub(r"\s+", " ", text).strip()
        return f"[{self.name}] {text}"


@dataclass
class BuildLog:
    steps: dict[int, Step] = field(default_factory=dict)
    raw: list[str] = field(default_factory=list)
    solve_error: str | None = None

    def feed(self, line: str) -> Step | None:
        """Take one line; return the step it changed (for progress display)."""
        line = line.rstrip("\n")
        self.raw.append(line)
        if m := _HEADER.match(line):
            sid = int(m.group(1))
            if sid not in self.steps:
                self.steps[sid] = Step(sid, m.group("name"), m.group("instr"))
            return self.steps[sid]
        if m := _INTERNAL.match(line):
            sid = int(m.group(1))
            self.steps.setdefault(sid, Step(sid, "internal", m.group("instr")))
            return None
        if m := _SOLVE_ERROR.match(line):
            self.solve_error = m.group("msg")
            return None
        step = self._step_of(line)
        if step is None:
            return None
        if m := _DONE.match(line):
            step.status, step.seconds = "done", float(m.group("secs"))
        elif _CACHED.match(line):
            step.status = "cached"
        elif m := _ERROR.match(line):
            step.status, step.error = "error", m.group("msg")
        elif (m := _OUTPUT.match(line)) and m.group("t") is not None:
            step.lines.append(m.group("text"))
        return step

    def _step_of(self, line: str) -> Step | None:
        m = re.match(r"^#(\d+) ", line)
        return self.steps.get(int(m.group(1))) if m else None

    def user_steps(self) -> list[Step]:
        """Dockerfile steps (no [internal] ones), in the order BuildKit announced them."""
        return [s for s in self.steps.values() if s.name != "internal"]

    def failed_step(self) -> Step | None:
        failed = [s for s in self.user_steps() if s.status == "error"]
        return failed[0] if failed else None

    def tail(self, n: int = 30) -> list[str]:
        step = self.failed_step()
        if step is not None and step.lines:
            return step.lines[-n:]
        return [ln for ln in self.raw if ln.strip()][-n:]

    def summary(self) -> list[dict[str, object]]:
        return [{"step": s.title, "status": s.status, "seconds": s.seconds} for s in self.user_steps()]

    def step_matching(self, stage: str, needle: str) -> Step | None:
        for s in self.user_steps():
            if s.stage == stage and needle in s.instruction:
                return s
        return None
