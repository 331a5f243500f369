"""Resolve: matrix row + user constraints + host -> one consistent set of pins."""

from envbuilder.resolve.request import HostFacts, ResolveRequest, parse_set
from envbuilder.resolve.resolver import Pin, Resolution, resolve

__all__ = ["HostFacts", "Pin", "Resolution", "ResolveRequest", "parse_set", "resolve"]
