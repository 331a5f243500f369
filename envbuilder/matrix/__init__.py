"""The compatibility matrix: data in matrices/*.toml, loaded and validated here."""

from envbuilder.matrix.load import load_matrix
from envbuilder.matrix.model import NONE, UNKNOWN, Fact, Matrix, Release

__all__ = ["NONE", "UNKNOWN", "Fact", "Matrix", "Release", "load_matrix"]
