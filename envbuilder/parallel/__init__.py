"""Preflight checks for a training layout (`envbuilder check-parallel`)."""

from envbuilder.parallel.check import GpuTarget, ParallelReport, check_layout
from envbuilder.parallel.layout import Layout, validate_layout
from envbuilder.parallel.memory import MemoryEstimate, estimate_memory
from envbuilder.parallel.recipes import Recipe, find_recipe, load_recipes
from envbuilder.parallel.rules import RuleResult

__all__ = [
    "GpuTarget", "Layout", "MemoryEstimate", "ParallelReport", "Recipe", "RuleResult", "check_layout",
    "estimate_memory", "find_recipe", "load_recipes", "validate_layout",
]
