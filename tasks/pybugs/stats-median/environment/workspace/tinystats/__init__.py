"""Descriptive statistics helpers."""

from .central import mean, median, mode
from .spread import describe, stdev, value_range, variance

__all__ = ["describe", "mean", "median", "mode", "stdev", "value_range", "variance"]
__version__ = "0.5.0"
