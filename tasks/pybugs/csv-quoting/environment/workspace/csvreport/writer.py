"""The CSV report writer.

A :class:`Report` is a list of :class:`Column` definitions plus rows (plain
dicts).  ``Report.to_csv()`` renders it as CSV text: one header line, then
one line per row, fields separated by ``,`` and lines terminated by ``\\n``.
The output is meant to be opened by spreadsheets and by Python's ``csv``
module.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping


def format_value(value: Any) -> str:
    """Turn one cell value into text.

    ``None`` becomes an empty string, booleans become ``yes``/``no``,
    dates use ISO format and floats are written with two decimals.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, Decimal):
        return str(value)
    return str(value)


@dataclass
class Column:
    """A report column: ``key`` is looked up in each row, ``header`` is printed."""

    key: str
    header: str | None = None
    formatter: Callable[[Any], str] = format_value

    @property
    def title(self) -> str:
        return self.header if self.header is not None else self.key


class Report:
    """A CSV report built from rows (mappings) and column definitions."""

    def __init__(self, columns: Iterable[Column | str]):
        self.columns = [c if isinstance(c, Column) else Column(c) for c in columns]
        self.rows: list[Mapping[str, Any]] = []

    def add_row(self, row: Mapping[str, Any]) -> None:
        """Append one row; missing keys are rendered as empty cells."""
        self.rows.append(row)

    def extend(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append several rows."""
        for row in rows:
            self.add_row(row)

    def _cells(self, row: Mapping[str, Any]) -> list[str]:
        return [col.formatter(row.get(col.key)) for col in self.columns]

    def _line(self, cells: list[str]) -> str:
        return ",".join(cells) + "\n"

    def to_csv(self) -> str:
        """Render the whole report (header line included) as CSV text."""
        parts = [self._line([col.title for col in self.columns])]
        parts.extend(self._line(self._cells(row)) for row in self.rows)
        return "".join(parts)

    def save(self, path: str | Path) -> Path:
        """Write the report to ``path`` (UTF-8) and return the path."""
        path = Path(path)
        path.write_text(self.to_csv(), encoding="utf-8")
        return path
