"""Load application settings: built-in defaults overlaid with a user TOML file."""

from .loader import DEFAULTS, load_settings, merge_settings

__all__ = ["DEFAULTS", "load_settings", "merge_settings"]
__version__ = "2.1.0"
