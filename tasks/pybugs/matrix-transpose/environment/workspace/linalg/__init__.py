"""linalg - tiny dependency-free helpers for dense matrices.

Matrices are plain lists of rows (lists of numbers), so they interoperate
with JSON, CSV readers and anything else that produces nested lists.
"""

from .matrix import add, identity, matmul, scale, shape, transpose, zeros

__all__ = ["add", "identity", "matmul", "scale", "shape", "transpose", "zeros"]
__version__ = "0.3.1"
