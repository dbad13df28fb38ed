from linalg import add, identity, matmul, scale, shape, transpose, zeros


def test_shape_and_constructors():
    assert shape(zeros(2, 3)) == (2, 3)
    assert shape([]) == (0, 0)
    assert identity(2) == [[1, 0], [0, 1]]


def test_add_and_scale():
    assert add([[1, 2], [3, 4]], [[10, 20], [30, 40]]) == [[11, 22], [33, 44]]
    assert scale([[1, 2]], 3) == [[3, 6]]


def test_transpose_square():
    assert transpose([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]


def test_matmul_square():
    a = [[1, 2], [3, 4]]
    assert matmul(a, identity(2)) == a
    assert matmul(a, a) == [[7, 10], [15, 22]]
