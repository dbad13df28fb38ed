"""confkit - small helpers for JSON configuration files."""

from .config import Config, deep_merge, load
from .paths import get_path

__all__ = ["Config", "deep_merge", "get_path", "load"]
__version__ = "0.2.0"
