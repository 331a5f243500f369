"""What enroot and Apptainer expect inside a root filesystem, as synthetic tar entries.

enroot (NVIDIA/enroot docker.sh `docker::configure`, doc/image-format.md):
  /etc/environment  the image ENV, one KEY=VALUE a line (host ${VARS} are substituted by enroot)
  /etc/rc           labels as comments, `mkdir -p WORKDIR`, `cd WORKDIR && unset OLDPWD`, source
                    /etc/rc.local, exec ENTRYPOINT/CMD (and WORKDIR itself exists in the tree)
  /etc/rc.local     empty hook for site additions
  /etc/fstab        image VOLUMEs as tmpfs mounts (x-create=dir)
  mount points      enroot's fstabs bind /proc /sys /dev /tmp and the files /etc/hosts,
                    /etc/hostname, /etc/resolv.conf with x-create, so they need not exist; we still
                    create them (empty) so a read-only squashfs mount never has to.
  /etc/profile.d/zz-envbuilder-path.sh  (ours) enroot starts a login shell, and Debian's
                    /etc/profile sets PATH unconditionally, hiding the image's PATH from
                    /etc/environment: bare `python` / `torchrun` were not found. This restores it.
Apptainer (apptainer internal/pkg/build/sources/base_environment.go):
  /.singularity.d/{actions/{exec,run,shell,start,test},env/*.sh,runscript,startscript,labels.json,
  libs/}, the /.exec /.run /.shell /.test /environment /singularity symlinks, and empty
  /etc/hosts and /etc/resolv.conf. The image ENV goes to env/90-environment.sh.
"""

from __future__ import annotations

import json
import shlex

from envbuilder.export.flatten import Entry, MergedTree, synthetic_dir, synthetic_file, synthetic_symlink
from envbuilder.export.image_source import ImageInfo

ENROOT_MOUNT_DIRS = {"proc": 0o755, "sys": 0o755, "dev": 0o755, "tmp": 0o1777, "run": 0o755}
MOUNT_FILES = ("etc/hosts", "etc/hostname", "etc/resolv.conf")


def _add_if_missing(tree: MergedTree, entry: Entry) -> None:
    if entry.path not in tree.entries:
        tree.put(entry)


def parse_env(env: list[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for item in env:
        key, _, value = item.partition("=")
        if key:
            out.append((key, value))
    return out


def enroot_rc(info: ImageInfo) -> str:
    lines = [f"# {k} {v}" for k, v in sorted(info.labels.items())]
    if lines:
        lines.append("")
    entrypoint = " ".join(shlex.quote(a) for a in info.entrypoint)
    cmd = info.cmd if (info.entrypoint or info.cmd) else ["/bin/sh"]
    cmd_q = " ".join(shlex.quote(a) for a in cmd)
    workdir = shlex.quote(info.workdir or "/")
    lines += [
        f"mkdir -p {workdir} 2> /dev/null",
        f"cd {workdir} && unset OLDPWD || exit 1",
        "",
        "if [ -s /etc/rc.local ]; then",
        "    . /etc/rc.local",
        "fi",
        "",
        "if [ $# -gt 0 ]; then",
        f'    exec {entrypoint + " " if entrypoint else ""}"$@"',
        "else",
        f"    exec {(entrypoint + ' ' + cmd_q).strip()}",
        "fi",
    ]
    return "\n".join(lines) + "\n"


PROFILE_PATH_SCRIPT = "etc/profile.d/zz-envbuilder-path.sh"


def profile_path_script(info: ImageInfo) -> str | None:
    """Sourced by login shells after /etc/profile set its own PATH: put the image's back."""
    path = dict(parse_env(info.env)).get("PATH")
    if path is None:
        return None
    return ("# The image's PATH (Docker ENV), written by envbuilder export: enroot and pyxis start a login\n"
            "# shell, whose /etc/profile replaces PATH; without this `python` or `torchrun` is not found.\n"
            f"PATH={shlex.quote(path)}\nexport PATH\n")


def add_enroot_files(tree: MergedTree, info: ImageInfo) -> None:
    env = "".join(f"{k}={v}\n" for k, v in parse_env(info.env))
    fstab = "".join(f"tmpfs {v} tmpfs x-create=dir,rw,nosuid,nodev\n" for v in info.volumes)
    _add_if_missing(tree, synthetic_dir("etc"))
    tree.put(synthetic_file("etc/environment", env.encode()))
    tree.put(synthetic_file("etc/rc", enroot_rc(info).encode(), 0o755))
    tree.put(synthetic_file("etc/fstab", fstab.encode()))
    _add_if_missing(tree, synthetic_file("etc/rc.local", b""))
    profile = profile_path_script(info)
    if profile is not None:
        _add_if_missing(tree, synthetic_dir("etc/profile.d"))
        tree.put(synthetic_file(PROFILE_PATH_SCRIPT, profile.encode()))
    if info.workdir and info.workdir != "/":
        add_parents(tree, info.workdir.strip("/"))
    add_mount_points(tree)


def add_parents(tree: MergedTree, path: str) -> None:
    """The directory `path` and its missing parents (enroot creates WORKDIR at import)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for i in range(1, len(parts) + 1):
        _add_if_missing(tree, synthetic_dir("/".join(parts[:i])))


def add_mount_points(tree: MergedTree) -> None:
    for d, mode in sorted(ENROOT_MOUNT_DIRS.items()):
        _add_if_missing(tree, synthetic_dir(d, mode))
    for f in MOUNT_FILES:
        _add_if_missing(tree, synthetic_file(f, b""))


# --- Apptainer ------------------------------------------------------------------

_ENV_LOOP = """for script in /.singularity.d/env/*.sh; do
    if [ -f "$script" ]; then
        . "$script"
    fi
done
"""

ACTIONS = {
    "exec": f'#!/bin/sh\n\n{_ENV_LOOP}\nexec "$@"\n',
    "run": f"""#!/bin/sh

{_ENV_LOOP}
if test -x "/.singularity.d/runscript"; then
    exec "/.singularity.d/runscript" "$@"
else
    echo "No Apptainer runscript found, executing /bin/sh"
    exec /bin/sh "$@"
fi
""",
    "shell": f"""#!/bin/sh

{_ENV_LOOP}
if test -n "$APPTAINER_SHELL" -a -x "$APPTAINER_SHELL"; then
    exec $APPTAINER_SHELL "$@"
elif test -x /bin/bash; then
    SHELL=/bin/bash
    PS1="Apptainer> "
    export SHELL PS1
    exec /bin/bash --norc "$@"
else
    SHELL=/bin/sh
    export SHELL
    exec /bin/sh "$@"
fi
""",
    "start": f'#!/bin/sh\n\n# notify PID 1 to continue\nkill -CONT 1\n\n{_ENV_LOOP}\n'
    'if test -x "/.singularity.d/startscript"; then\n    exec "/.singularity.d/startscript"\nfi\n',
    "test": f'#!/bin/sh\n\n{_ENV_LOOP}\nif test -x "/.singularity.d/test"; then\n'
    '    exec "/.singularity.d/test" "$@"\nfi\nexec /bin/sh -c true\n',
}

ENV_SCRIPTS = {
    "01-base.sh": "#!/bin/sh\n",
    "95-apps.sh": "#!/bin/sh\n",
    "99-base.sh": """#!/bin/sh
if [ -z "$LD_LIBRARY_PATH" ]; then
    LD_LIBRARY_PATH="/.singularity.d/libs"
else
    LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/.singularity.d/libs"
fi
PS1="Apptainer> "
export LD_LIBRARY_PATH PS1
""",
    "99-runtimevars.sh": """#!/bin/sh
if [ -n "${SING_USER_DEFINED_PREPEND_PATH:-}" ]; then
    PATH="${SING_USER_DEFINED_PREPEND_PATH}:${PATH}"
fi
if [ -n "${SING_USER_DEFINED_APPEND_PATH:-}" ]; then
    PATH="${PATH}:${SING_USER_DEFINED_APPEND_PATH}"
fi
if [ -n "${SING_USER_DEFINED_PATH:-}" ]; then
    PATH="${SING_USER_DEFINED_PATH}"
fi
unset SING_USER_DEFINED_PREPEND_PATH SING_USER_DEFINED_APPEND_PATH SING_USER_DEFINED_PATH
export PATH
""",
}


def environment_sh(info: ImageInfo) -> str:
    """The image ENV as POSIX sh: the image's values win over the host's, as with Docker."""
    lines = ["#!/bin/sh", "# Environment of the image (Docker ENV), written by envbuilder export"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in parse_env(info.env)]
    return "\n".join(lines) + "\n"


def runscript(info: ImageInfo) -> str:
    entry = " ".join(shlex.quote(a) for a in info.entrypoint)
    cmd = " ".join(shlex.quote(a) for a in info.cmd) or "/bin/sh"
    lines = ["#!/bin/sh", "# Docker ENTRYPOINT/CMD semantics: arguments replace CMD"]
    if info.workdir:
        lines.append(f"cd {shlex.quote(info.workdir)} || exit 1")
    lines.append("if [ $# -gt 0 ]; then")
    if not entry:
        # `apptainer run IMAGE -c 'cmd'`: options are for CMD (e.g. /bin/bash), not a command
        lines += ['    case "$1" in', f'        -*) exec {cmd} "$@" ;;', "    esac"]
    lines += [
        f'    exec {entry + " " if entry else ""}"$@"',
        "fi",
        f"exec {(entry + ' ' + cmd).strip()}",
    ]
    return "\n".join(lines) + "\n"


def add_singularity_files(tree: MergedTree, info: ImageInfo, labels: dict[str, str], deffile: str) -> None:
    base = ".singularity.d"
    for d in (base, f"{base}/actions", f"{base}/env", f"{base}/libs"):
        tree.put(synthetic_dir(d))
    for name, body in sorted(ACTIONS.items()):
        tree.put(synthetic_file(f"{base}/actions/{name}", body.encode(), 0o755))
    for name, body in sorted(ENV_SCRIPTS.items()):
        tree.put(synthetic_file(f"{base}/env/{name}", body.encode(), 0o755))
    tree.put(synthetic_file(f"{base}/env/90-environment.sh", environment_sh(info).encode(), 0o755))
    tree.put(synthetic_file(f"{base}/runscript", runscript(info).encode(), 0o755))
    tree.put(synthetic_file(f"{base}/startscript", b"#!/bin/sh\n", 0o755))
    tree.put(synthetic_file(f"{base}/labels.json", (json.dumps(labels, indent=4, sort_keys=True) + "\n").encode()))
    tree.put(synthetic_file(f"{base}/Singularity", deffile.encode()))
    for link, target in (
        (".exec", f"{base}/actions/exec"),
        (".run", f"{base}/actions/run"),
        (".shell", f"{base}/actions/shell"),
        (".test", f"{base}/actions/test"),
        ("environment", f"{base}/env/90-environment.sh"),
        ("singularity", f"{base}/runscript"),
    ):
        _add_if_missing(tree, synthetic_symlink(link, target))
    for d in ("home", "root", "var/tmp"):
        _add_if_missing(tree, synthetic_dir(d, 0o700 if d == "root" else 0o755))
    _add_if_missing(tree, synthetic_dir("var"))
    add_mount_points(tree)
