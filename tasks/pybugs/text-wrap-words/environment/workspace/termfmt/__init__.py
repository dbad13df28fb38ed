"""Formatting helpers for terminal output."""

from .box import boxed
from .wrap import wrap

__all__ = ["boxed", "wrap"]
__version__ = "0.2.0"
