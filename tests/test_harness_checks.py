"""harness_checks.plain (harness/tasks/checks.py): what a native task's tests compare is made of
built-in values, or the test fails saying which part is not."""

import datetime
from decimal import Decimal
from fractions import Fraction

import pytest

from harness.tasks.checks import plain


class AlwaysEqual(float):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = float.__hash__


class AlwaysTrue:
    def __bool__(self) -> bool:
        return True


class Listish(list[int]):
    def __contains__(self, item: object) -> bool:
        return True


@pytest.mark.parametrize(
    "value",
    [
        0,
        -2.5,
        True,
        None,
        "s",
        b"b",
        1j,
        [1, (2, 3.0), {"k": {4, frozenset({5})}}],
        {(1, "a"): [None]},
        datetime.date(2024, 2, 29),
        datetime.timedelta(days=1),
        Decimal("1.01"),
        Fraction(1, 3),
    ],
)
def test_built_in_values_come_back_unchanged(value: object) -> None:
    assert plain(value) is value


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (AlwaysEqual(0), "the value is a test_harness_checks.AlwaysEqual"),
        (AlwaysTrue(), "test_harness_checks.AlwaysTrue, not a built-in value"),
        (Listish([1]), "Listish"),
        ([1, [2, AlwaysEqual(3)]], "the value[1][1] is a"),
        ({"a": AlwaysEqual(1)}, "the value['a'] is a"),
        ({AlwaysEqual(1): 1}, "the value's key #1 is a"),
        ((x for x in [1]), "generator"),
    ],
)
def test_anything_else_fails_the_test_and_says_where(value: object, says: str) -> None:
    with pytest.raises(AssertionError, match="its comparisons are its own code") as caught:
        plain(value)
    assert says in str(caught.value)


def test_a_list_that_holds_itself_is_refused_not_followed() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(AssertionError, match="nested deeper than 100"):
        plain(loop)


def test_a_fake_key_s_own_repr_is_never_called() -> None:
    class Loud(AlwaysEqual):
        def __repr__(self) -> str:
            raise RuntimeError("repr called")

    with pytest.raises(AssertionError, match="key #1"):
        plain({Loud(1): 1})


def test_a_container_subclass_that_overrides_nothing_counts_as_its_base_and_one_that_does_not_fails() -> None:
    """A NamedTuple (a task's RestockLine, Token) compares as the tuple it is; a subclass with its
    own __eq__, __iter__ or __len__, or a Counter (its own comparisons), is refused as before."""
    from collections import Counter
    from typing import NamedTuple

    class Line(NamedTuple):
        sku: str
        short: int

    class Liar(NamedTuple):
        sku: str

        def __eq__(self, other: object) -> bool:  # type: ignore[override]
            return True

        __hash__ = tuple.__hash__

    class Shorter(list[int]):
        def __len__(self) -> int:
            return 0

    assert plain([Line("a", 1)]) == [("a", 1)]
    for fake in (Liar("x"), Shorter([1]), Counter(a=1), [Line("a", AlwaysEqual(1))]):  # type: ignore[arg-type]
        with pytest.raises(AssertionError, match="not a built-in value"):
            plain(fake)
    assert plain(dict(Counter(a=1))) == {"a": 1}  # what a test does with a Counter
