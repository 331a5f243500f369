"""Bundle: an offline install kit (index files, lock, stage-2 wheelhouse, sha256 manifest) and its installer."""

from envbuilder.bundle.install import InstallOptions, InstallResult, run_install
from envbuilder.bundle.pipeline import BundleOptions, BundleResult, make_bundle

__all__ = ["BundleOptions", "BundleResult", "InstallOptions", "InstallResult", "make_bundle", "run_install"]
