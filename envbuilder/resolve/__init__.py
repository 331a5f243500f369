"""Resolve: matrix row + user constraints + host -> one consistent set of pins."""

from envbuilder.resolve.request import HostFacts, ResolveRequest, parse_set
from envbuilder.resolve.resolver import Pin, Resolution, lock_glibc, resolve

__all__ = ["HostFacts", "Pin", "Resolution", "ResolveRequest", "lock_glibc", "parse_set", "resolve"]
