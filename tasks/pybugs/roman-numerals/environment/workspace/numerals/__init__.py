"""Convert integers to and from Roman numerals."""

from .core import MAX_VALUE, MIN_VALUE, from_roman, to_roman

__all__ = ["MAX_VALUE", "MIN_VALUE", "from_roman", "to_roman"]
__version__ = "0.3.1"
