import os
import sys

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import copy

import pytest

from linalg import identity, matmul, shape, transpose


def test_transpose_wide():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]


def test_transpose_tall():
    assert transpose([[1, 2], [3, 4], [5, 6]]) == [[1, 3, 5], [2, 4, 6]]


def test_transpose_vectors_and_empty():
    assert transpose([[1, 2, 3, 4]]) == [[1], [2], [3], [4]]
    assert transpose([[1], [2], [3]]) == [[1, 2, 3]]
    assert transpose([]) == []


def test_transpose_roundtrip_and_no_mutation():
    m = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    original = copy.deepcopy(m)
    t = transpose(m)
    assert shape(t) == (4, 3)
    assert transpose(t) == original
    assert m == original


def test_transpose_square_still_works():
    assert transpose([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]


def test_matmul_non_square():
    a = [[1, 2, 3], [4, 5, 6]]
    b = [[7, 8], [9, 10], [11, 12]]
    assert matmul(a, b) == [[58, 64], [139, 154]]
    assert matmul(b, a) == [[39, 54, 69], [49, 68, 87], [59, 82, 105]]


def test_matmul_vectors():
    assert matmul([[1, 2, 3]], [[4], [5], [6]]) == [[32]]
    assert matmul([[1], [2]], [[3, 4, 5]]) == [[3, 4, 5], [6, 8, 10]]
    a = [[1, 2, 3], [4, 5, 6]]
    assert matmul(a, identity(3)) == a
    assert matmul(identity(2), a) == a


def test_matmul_inner_dimension_mismatch_raises():
    with pytest.raises(ValueError) as excinfo:
        matmul([[1, 2, 3], [4, 5, 6]], [[1, 0], [0, 1]])
    message = str(excinfo.value)
    assert "(2, 3)" in message and "(2, 2)" in message


def test_matmul_mismatch_right_has_more_rows():
    with pytest.raises(ValueError) as excinfo:
        matmul([[1, 2], [3, 4]], [[1], [2], [3]])
    message = str(excinfo.value)
    assert "(2, 2)" in message and "(3, 1)" in message


def test_matmul_row_times_row_raises():
    with pytest.raises(ValueError):
        matmul([[1, 2, 3]], [[1, 2, 3]])
