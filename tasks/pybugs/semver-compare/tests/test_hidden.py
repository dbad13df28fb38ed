import os
import random
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest  # noqa: E402

from versiontools import compare_versions, is_newer, latest, sort_versions  # noqa: E402

SEMVER_SPEC_ORDER = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
]


@pytest.mark.parametrize(
    "a, b",
    [
        ("1.9.0", "1.10.0"),
        ("2.0.0", "10.0.0"),
        ("1.0.9", "1.0.10"),
        ("0.9.99", "0.10.0"),
        ("9.99.99", "10.0.0"),
        ("v1.2.3", "1.2.10"),
    ],
)
def test_numeric_core(a, b):
    assert plain(compare_versions(a, b)) == -1
    assert plain(compare_versions(b, a)) == 1


def test_prerelease_before_release():
    assert plain(compare_versions("1.0.0-alpha", "1.0.0")) == -1
    assert plain(compare_versions("1.0.0", "1.0.0-rc.1")) == 1
    # a pre-release of a higher version still beats a lower release
    assert plain(compare_versions("1.1.0-alpha", "1.0.0")) == 1
    assert plain(compare_versions("2.0.0-rc.1", "1.10.0")) == 1


def test_semver_spec_chain_pairwise():
    for i, lower in enumerate(SEMVER_SPEC_ORDER):
        for higher in SEMVER_SPEC_ORDER[i + 1:]:
            assert plain(compare_versions(lower, higher)) == -1, (lower, higher)
            assert plain(compare_versions(higher, lower)) == 1, (higher, lower)
        assert plain(compare_versions(lower, lower)) == 0


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("1.0.0-1", "1.0.0-alpha", -1),  # numeric identifiers sort before alphanumeric
        ("1.0.0-2", "1.0.0-10", -1),  # numeric identifiers compare as numbers
        ("1.0.0-Alpha", "1.0.0-alpha", -1),  # alphanumeric compare in ASCII order
        ("1.0.0-alpha.beta", "1.0.0-alpha.1", 1),
        ("1.0.0-rc.1", "1.0.0-rc.1.1", -1),  # more identifiers wins when prefix equal
        ("1.0.0-x-y", "1.0.0-x", 1),
        ("1.0.0-rc.1+build.1", "1.0.0-rc.1+build.2", 0),
        ("v1.0.0-beta", "1.0.0-beta", 0),
    ],
)
def test_prerelease_identifiers(a, b, expected):
    assert plain(compare_versions(a, b)) == plain(expected)


def test_helpers_follow_ordering():
    shuffled = SEMVER_SPEC_ORDER[:]
    random.Random(1234).shuffle(shuffled)
    assert plain(sort_versions(shuffled)) == plain(SEMVER_SPEC_ORDER)
    assert plain(sort_versions(shuffled, reverse=True)) == plain(SEMVER_SPEC_ORDER[::-1])
    assert plain(latest(["1.0.0", "1.0.0-rc.1", "0.9.12"])) == "1.0.0"
    assert plain(latest(["1.0.0-rc.1", "1.0.0", "0.9.12"])) == "1.0.0"
    assert plain(latest(["1.9.0", "1.10.0", "1.10.0-rc.2"])) == "1.10.0"
    assert plain(is_newer("1.10.0", "1.9.0"))
    assert not plain(is_newer("2.0.0", "10.0.0"))
    assert not plain(is_newer("1.0.0-rc.1", "1.0.0"))


def test_validation_unchanged():
    for bad in ("1.2", "1.02.3", "1.0.0-", "1.0.0-alpha..1", "x.y.z"):
        with pytest.raises(ValueError):
            compare_versions(bad, "1.0.0")
    with pytest.raises(ValueError):
        latest([])
