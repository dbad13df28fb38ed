"""Render tabular reports (lists of dicts) as CSV text or files."""

from .writer import Column, Report, format_value

__all__ = ["Column", "Report", "format_value"]
__version__ = "1.2.0"
