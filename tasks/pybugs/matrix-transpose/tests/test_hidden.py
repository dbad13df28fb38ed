import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import copy

import pytest

from linalg import identity, matmul, shape, transpose


def test_transpose_wide():
    assert plain(transpose([[1, 2, 3], [4, 5, 6]])) == [[1, 4], [2, 5], [3, 6]]


def test_transpose_tall():
    assert plain(transpose([[1, 2], [3, 4], [5, 6]])) == [[1, 3, 5], [2, 4, 6]]


def test_transpose_vectors_and_empty():
    assert plain(transpose([[1, 2, 3, 4]])) == [[1], [2], [3], [4]]
    assert plain(transpose([[1], [2], [3]])) == [[1, 2, 3]]
    assert plain(transpose([])) == []


def test_transpose_roundtrip_and_no_mutation():
    m = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    original = copy.deepcopy(m)
    t = transpose(m)
    assert plain(shape(t)) == (4, 3)
    assert plain(transpose(t)) == plain(original)
    assert plain(m) == plain(original)


def test_transpose_square_still_works():
    assert plain(transpose([[1, 2], [3, 4]])) == [[1, 3], [2, 4]]


def test_matmul_non_square():
    a = [[1, 2, 3], [4, 5, 6]]
    b = [[7, 8], [9, 10], [11, 12]]
    assert plain(matmul(a, b)) == [[58, 64], [139, 154]]
    assert plain(matmul(b, a)) == [[39, 54, 69], [49, 68, 87], [59, 82, 105]]


def test_matmul_vectors():
    assert plain(matmul([[1, 2, 3]], [[4], [5], [6]])) == [[32]]
    assert plain(matmul([[1], [2]], [[3, 4, 5]])) == [[3, 4, 5], [6, 8, 10]]
    a = [[1, 2, 3], [4, 5, 6]]
    assert plain(matmul(a, identity(3))) == plain(a)
    assert plain(matmul(identity(2), a)) == plain(a)


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
