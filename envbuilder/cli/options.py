"""Options shared by several commands, spelled once: `--json`, `--timings`, the host options, the row options,
the lock-directory input, `--arch-list`, `--ca-bundle`, `--interpreter`, `--parallel`, and hidden deprecated
aliases for renamed options. One meaning per name: `--jobs` is always compile jobs (MAX_JOBS), `--parallel`
always how many things run at once.

The value sets behind every click.Choice live in envbuilder/choices.py, where the stages'
validators read them too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from envbuilder.archlist import ArchList
from envbuilder.errors import InvalidOptionError

F = TypeVar("F", bound=Callable[..., Any])


def choice(values: tuple[str, ...]) -> click.Choice:
    return click.Choice(list(values))


def json_option(help: str = "Print the result as JSON on stdout.") -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True, help=help)


def timings_option(f: F) -> F:
    """--json output is the same bytes for the same inputs; wall-clock timings only on request."""
    return click.option("--timings", is_flag=True,
                        help="Include wall-clock timings in the --json output (which then differs run to run).")(f)


def git_mirror_option(f: F) -> F:
    """--git-mirror (repeatable): where the lock's git-tag sources (record `git_sources`) come from when the
    repository's host is unreachable; the function receives `git_mirrors` (a tuple of the values)."""
    return click.option(
        "--git-mirror", "git_mirrors", multiple=True, metavar="URL=PATH|DIR",
        help="A local clone of a repository the lock builds a stage-2 package from (URL=PATH), or a directory of "
             "clones found by name (DIR: OWNER+NAME/repo, OWNER/NAME.git, NAME.git); repeatable. Also "
             "ENVBUILDER_GIT_MIRRORS (comma-separated).")(f)


def _parse_arch_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> ArchList | None:
    if value is None:
        return None
    from envbuilder.matrix.archs import check_arch_list

    return check_arch_list(ArchList.parse(value), cuda=None)  # each sm names a GPU; the row's CUDA is checked later


def arch_list_option() -> Callable[[F], F]:
    """--arch-list ARCHS, parsed once into an ArchList (every arch checked against matrices/cuda_archs.toml); the
    function receives `arch_list` (None when not given: the lock's own list applies)."""
    return click.option(
        "--arch-list", "arch_list", default=None, metavar="ARCHS", callback=_parse_arch_list,
        help="GPU archs the stage-2 kernels are compiled for (TORCH_CUDA_ARCH_LIST, NVTE_CUDA_ARCHS), e.g. 9.0, "
             "8.0;9.0+PTX or sm_80,sm_90. lock records it; build and wheels default to the lock's: its --arch-list, "
             "else the host's sm for a lock made for a host, else every data-center/workstation GPU from Ampere on "
             "that the lock's CUDA compiles for (matrices/cuda_archs.toml [default]).")


def cache_dir_option() -> Callable[[F], F]:
    """--cache-dir DIR: the local cache root (downloads, built wheels, build venvs); the function receives
    `cache_dir`."""
    return click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
                        help="Local cache root: downloads, built wheels and build venvs (default ENVBUILDER_CACHE_DIR, "
                             "else $XDG_CACHE_HOME/envbuilder or ~/.cache/envbuilder).")


def ca_bundle_option() -> Callable[[F], F]:
    """--ca-bundle PEM: the CA of a TLS-intercepting proxy, for every command that reaches an index or a registry
    (build hands it to BuildKit as a secret); the function receives `ca_bundle`."""
    return click.option(
        "--ca-bundle", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None, metavar="PEM",
        help="CA bundle for a TLS-intercepting proxy (default: SSL_CERT_FILE or REQUESTS_CA_BUNDLE when set, else "
             "the system bundle).")


def interpreter_option(what: str, *, on_host: bool = True, default: str | None = None) -> Callable[[F], F]:
    """--interpreter PY: the Python interpreter of the environment a command works with (one meaning: the
    environment's own python). `on_host`: a path on this machine that must exist; otherwise a name or path inside a
    container. The function receives `interpreter`."""
    kind: Any = click.Path(path_type=Path, exists=True, dir_okay=False) if on_host else str
    return click.option("--interpreter", type=kind, default=default, show_default=default is not None, metavar="PY",
                        help=f"The Python interpreter {what}.")


def parallel_option(what: str, default: int | None = None, note: str = "") -> Callable[[F], F]:
    """--parallel N: how many `what` ("rows run") at once (never compile jobs: that is --jobs). The function
    receives `parallel`."""
    return click.option("--parallel", type=click.IntRange(1, 64), default=default, show_default=default is not None,
                        metavar="N", help=f"{what[0].upper()}{what[1:]} at once{'; ' + note if note else ''}.")


def gpu_option(param: str = "gpu") -> Callable[[F], F]:
    """--gpu NAME: a GPU model from matrices/gpus.toml; the function receives it as `param`."""
    return click.option("--gpu", param, metavar="NAME", default=None,
                        help="GPU model from matrices/gpus.toml, e.g. H100 (its sm and memory; default for a host: "
                             "the detected one).")


def row_options(func: F) -> F:
    """--nemo / --release / --mbridge: the three ways to name one matrix row."""
    func = click.option("--mbridge", default=None, metavar="VERSION",
                        help="Megatron-Bridge version of a row, e.g. 0.4.0.")(func)
    func = click.option("--release", default=None, metavar="YY.MM",
                        help="NeMo Framework release (container tag) of a row, e.g. 26.04 or 25.11.")(func)
    func = click.option("--nemo", default=None, metavar="TAG",
                        help="NeMo release tag of a row, e.g. v2.3.0 (or a test profile).")(func)
    return func


def chosen_row(nemo: str | None, release: str | None, mbridge: str | None) -> tuple[str, str]:
    """(key, option) of the one row option given."""
    given = [(v, o) for v, o in ((nemo, "nemo"), (release, "release"), (mbridge, "mbridge")) if v]
    if len(given) != 1:
        raise InvalidOptionError("name one matrix row: --nemo TAG, --release YY.MM or --mbridge VERSION"
                                 + (f" (got {', '.join('--' + o for _, o in given)})" if given else ""),
                                 "e.g. --release 26.04 or --nemo v2.3.0 (envbuilder matrix list)")
    return given[0]


def host_options(*, detect: bool = False, count: bool = False) -> Callable[[F], F]:
    """--driver, --gpu, --sm (the target host, planned from flags), plus --no-detect or --gpus N.

    The function receives them as `driver`, `gpu`, `sm` (and `no_detect` / `gpu_count`).
    """

    def deco(f: F) -> F:
        if count:
            f = click.option("--gpus", "gpu_count", type=int, metavar="N",
                             help="Number of GPUs in the planned host.")(f)
        if detect:
            f = click.option("--no-detect", is_flag=True, help="Do not read the local host through NVML.")(f)
        f = click.option("--sm", metavar="X.Y", default=None,
                         help="Target compute capability, e.g. 9.0 (instead of --gpu).")(f)
        f = gpu_option()(f)
        f = click.option("--driver", metavar="VERSION", default=None,
                         help="Target NVIDIA driver, e.g. 570.86.15 (default: detected host).")(f)
        return f

    return deco


def deprecated_alias(old: str, new: str, param: str, **attrs: Any) -> Callable[[F], F]:
    """A hidden option `old` that still works for one release: it warns and feeds `param`
    (the option now spelled `new`). Giving both is an error."""
    hidden_name = f"_deprecated_{param}"

    def deco(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            value = kwargs.pop(hidden_name, None)
            if value is not None:
                ctx = click.get_current_context()
                src = ctx.get_parameter_source(param)
                if src is not None and src.name == "COMMANDLINE":
                    raise InvalidOptionError(f"{old} and {new} name the same option", f"pass only {new}")
                click.echo(f"warning: {old} is deprecated and will be removed in the next release; "
                           f"use {new}", err=True)
                kwargs[param] = value
            return f(*args, **kwargs)

        return click.option(old, hidden_name, hidden=True, default=None, **attrs)(wrapper)  # type: ignore[return-value]

    return deco


def lock_dir_input(*, positional: bool = False, required: bool = False, exists: bool = False,
                   help: str = "Lock directory (made by `envbuilder lock`).") -> Callable[[F], F]:
    """The lock directory a command reads: `--lock LOCKDIR` everywhere, and for commands whose
    primary input it is also a positional LOCKDIR. The function receives it as `lock`."""

    path_type = click.Path(path_type=Path, file_okay=False, exists=exists)

    def deco(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = kwargs.pop("lock_positional", None) if positional else None
            opt = kwargs.get("lock")
            if given is not None and opt is not None and Path(given) != Path(opt):
                raise InvalidOptionError(f"two lock directories: {given} and --lock {opt}", "pass one of them")
            value = opt if opt is not None else given
            if value is None and required:
                raise click.UsageError("missing the lock directory: pass LOCKDIR or --lock LOCKDIR"
                                       if positional else "missing option --lock LOCKDIR")
            kwargs["lock"] = value
            return f(*args, **kwargs)

        out: Any = click.option("--lock", "lock", type=path_type, default=None, metavar="LOCKDIR", help=help)(
            wrapper)
        if positional:
            out = click.argument("lock_positional", metavar="[LOCKDIR]", required=False, type=path_type)(out)
        return out

    return deco


class FiniteFloat(click.FloatRange):
    """A float option that is a real number: NaN and infinities are refused (click's FloatRange lets NaN
    through every bound, so `--threshold nan` would switch a gate off). Every float option uses it."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        out = super().convert(value, param, ctx)
        if isinstance(out, float) and not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return out


def threshold_option(help: str) -> Callable[[F], F]:
    """--threshold: the regression gate's percent drop (report and nightly run)."""
    return click.option("--threshold", "threshold_pct", type=FiniteFloat(0, 100), default=10.0, show_default=True,
                        help=help)


#: the shared wheel cache's settings, the same for every command that reads it (so set once for a shell or a CI job)
WHEEL_CACHE_ENV = "ENVBUILDER_WHEEL_CACHE"
#: environment variables shared by several commands, instead of one ENVBUILDER_<COMMAND>_<OPTION> each
SHARED_ENVVARS = (WHEEL_CACHE_ENV, f"{WHEEL_CACHE_ENV}_TRUSTED_KEY", f"{WHEEL_CACHE_ENV}_TRUST_UNSIGNED")


def wheel_cache_options(*, publish: bool = False) -> Callable[[F], F]:
    """--cache URL, --trusted-key PUB (repeatable), --trust-unsigned: read stage-2 wheels from a shared cache.
    With publish=True also --publish URL, --sign KEY, --no-sign (`wheels` only).

    The function receives `wheel_cache` (a kernels.wheelcache.CacheSource, or None) and, with publish,
    `publish_to` (a PublishTarget, or None). The URL is parsed once here; the keys are read by the stage.
    """

    def deco(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from envbuilder.kernels.wheelcache.shared import CacheSource, PublishTarget
            from envbuilder.kernels.wheelcache.url import CacheUrl

            url, keys, unsigned = kwargs.pop("cache_url"), kwargs.pop("trusted_keys"), kwargs.pop("trust_unsigned")
            kwargs["wheel_cache"] = CacheSource(CacheUrl.parse(url), tuple(keys), unsigned) if url else None
            if publish:
                to, sign, no_sign = kwargs.pop("publish_url"), kwargs.pop("sign_key"), kwargs.pop("no_sign")
                if sign is not None and no_sign:
                    raise InvalidOptionError("--sign and --no-sign contradict each other", "pass one of them")
                if (sign is not None or no_sign) and not to:
                    raise InvalidOptionError("--sign/--no-sign without --publish", "pass --publish URL")
                kwargs["publish_to"] = PublishTarget(CacheUrl.parse(to, "--publish"), sign, no_sign) if to else None
            return f(*args, **kwargs)

        out: Any = wrapper
        if publish:
            out = click.option("--no-sign", is_flag=True,
                               help="Publish entries unsigned (readers then need --trust-unsigned).")(out)
            out = click.option("--sign", "sign_key", type=click.Path(path_type=Path, dir_okay=False, exists=True),
                               default=None,
                               help="ed25519 private key (PEM, from `envbuilder keygen`) that signs the published "
                                    "entries. Without it, a PEM key in $ENVBUILDER_SIGNING_KEY is used.")(out)
            out = click.option("--publish", "publish_url", default=None, metavar="URL",
                               help="After the run, store every wheel in this shared cache (a directory, file://, "
                                    "or oci://HOST/REPO), signed.")(out)
        out = click.option("--trust-unsigned", is_flag=True, envvar=f"{WHEEL_CACHE_ENV}_TRUST_UNSIGNED",
                           show_envvar=True,
                           help="Accept shared-cache entries without a signature (their sha256 and archs are still "
                                "checked).")(out)
        out = click.option("--trusted-key", "trusted_keys", multiple=True,
                           type=click.Path(path_type=Path, dir_okay=False, exists=True),
                           envvar=f"{WHEEL_CACHE_ENV}_TRUSTED_KEY", show_envvar=True, metavar="PUB",
                           help="Public key (PEM) whose signature a shared-cache entry must carry (repeatable).")(out)
        out = click.option("--cache", "cache_url", default=None, metavar="URL", envvar=WHEEL_CACHE_ENV,
                           show_envvar=True,
                           help="Shared wheel cache to take stage-2 wheels from before compiling: a directory, "
                                "file:///DIR, oci://HOST[:PORT]/REPO, or http(s)://HOST/PATH/ (a PEP 503 index). "
                                "A hit is downloaded and verified; a miss is built; an unreachable cache is "
                                "skipped with a warning.")(out)
        return out

    return deco
