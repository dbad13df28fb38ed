import pytest

from versiontools import compare_versions, is_newer, latest, sort_versions


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("1.2.3", "1.2.4", -1),
        ("2.0.0", "1.0.0", 1),
        ("1.4.2", "1.4.2", 0),
        ("v1.0.0", "1.0.0", 0),
        ("1.0.0+build.5", "1.0.0", 0),
    ],
)
def test_compare(a, b, expected):
    assert compare_versions(a, b) == expected


def test_helpers():
    assert is_newer("2.0.0", "1.4.2")
    assert not is_newer("1.4.2", "1.4.2")
    assert latest(["1.0.0", "1.2.0", "1.1.9"]) == "1.2.0"
    assert sort_versions(["v1.1.0", "1.0.0"]) == ["1.0.0", "v1.1.0"]


@pytest.mark.parametrize("bad", ["1.2", "1.2.3.4", "01.2.3", "1.2.3-", "banana"])
def test_invalid(bad):
    with pytest.raises(ValueError):
        compare_versions(bad, "1.0.0")
