"""Basic dense-matrix operations on lists of lists.

A matrix with ``r`` rows and ``c`` columns is represented as a list of ``r``
lists, each holding ``c`` numbers.  None of the functions mutate their
arguments; they always return fresh lists.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

Number = float
Matrix = List[List[Number]]


def shape(m: Sequence[Sequence[Number]]) -> Tuple[int, int]:
    """Return ``(rows, cols)`` of ``m``.

    An empty matrix has shape ``(0, 0)``.  Raises ``ValueError`` if the rows
    do not all have the same length.
    """
    rows = len(m)
    if rows == 0:
        return (0, 0)
    cols = len(m[0])
    for i, row in enumerate(m):
        if len(row) != cols:
            raise ValueError(f"row {i} has length {len(row)}, expected {cols}")
    return (rows, cols)


def zeros(rows: int, cols: int) -> Matrix:
    """Return a ``rows`` x ``cols`` matrix filled with zeros."""
    return [[0 for _ in range(cols)] for _ in range(rows)]


def identity(n: int) -> Matrix:
    """Return the ``n`` x ``n`` identity matrix."""
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def add(a: Matrix, b: Matrix) -> Matrix:
    """Element-wise sum of two matrices of the same shape."""
    if shape(a) != shape(b):
        raise ValueError(f"add: shapes {shape(a)} and {shape(b)} differ")
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def scale(m: Matrix, k: Number) -> Matrix:
    """Multiply every element of ``m`` by the scalar ``k``."""
    return [[k * x for x in row] for row in m]


def transpose(m: Matrix) -> Matrix:
    """Return the transpose of ``m``: element ``[i][j]`` becomes ``[j][i]``.

    A ``r`` x ``c`` matrix becomes a ``c`` x ``r`` matrix.
    """
    rows, cols = shape(m)
    return [[m[j][i] for j in range(rows)] for i in range(rows)]


def matmul(a: Matrix, b: Matrix) -> Matrix:
    """Matrix product ``a @ b``.

    ``a`` must be ``n`` x ``k`` and ``b`` must be ``k`` x ``m``; the result is
    ``n`` x ``m``.
    """
    bt = transpose(b)
    return [[sum(x * y for x, y in zip(row, col)) for col in bt] for row in a]
