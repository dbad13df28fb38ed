"""weatherkit - small utilities for handling weather-station readings."""

from .reading import Reading, summarize
from .units import UNITS, convert

__all__ = ["Reading", "UNITS", "convert", "summarize"]
__version__ = "0.5.2"
