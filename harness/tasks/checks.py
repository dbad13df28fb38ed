"""What a native task's tests compare, made of values the tested code cannot fake (standard library only).

The guarded runner (guard.py) puts this file on the tests' path as ``harness_checks``. In a test,
``plain(x)`` returns ``x`` unchanged when it is made only of built-in values (the exact built-in
types, no subclass, in any nesting of lists, tuples, dicts and sets; also the exact standard
dates, times, decimals and fractions; a container subclass that overrides none of its
comparisons, truth, length, membership or access, such as a NamedTuple, counts as its base), and
fails the test otherwise::

    from harness_checks import plain

    assert plain(median([1, 2, 3, 4])) == 2.5
    assert plain(is_leap(2000)) is True

Why: ``got == want`` asks ``got``. The tested code can return a float subclass whose ``__eq__``
is always true, a list whose ``__contains__`` always answers yes, an object whose ``__bool__`` is
always true: every bare ``==`` (and ``in``, ``<``, a truth test) on such a value passes without
the task being solved. On exact built-in types those operators are the interpreter's own.
"""

import datetime
import decimal
import fractions

_SCALARS = frozenset(
    {bool, int, float, complex, str, bytes, type(None), range, slice}
    | {datetime.date, datetime.datetime, datetime.time, datetime.timedelta, datetime.timezone}
    | {decimal.Decimal, fractions.Fraction}
)
_SEQUENCES = frozenset({list, tuple, set, frozenset})
_MAX_DEPTH = 100  # deeper nesting is refused rather than followed (a self-referencing list)
# What a container's comparisons, truth and membership are made of: a subclass that defines none of
# these itself (a NamedTuple, a plain subclass) behaves as its built-in base.
_BEHAVIOUR = (
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__len__",
    "__contains__", "__iter__", "__getitem__", "keys", "items", "values",
)  # fmt: skip


def _as_builtin(kind: type) -> type | None:
    """The built-in container ``kind`` behaves as: itself, or the base of a subclass that
    overrides nothing of _BEHAVIOUR (looked up as the interpreter does, along the MRO, with the
    plain metaclass); None for anything else."""
    if kind in _SEQUENCES or kind is dict:
        return kind
    if type(kind) is not type:
        return None
    base = next((b for b in (tuple, list, dict, set, frozenset) if issubclass(kind, b)), None)
    if base is None:
        return None
    for name in _BEHAVIOUR:
        owner = next((k for k in kind.__mro__ if name in k.__dict__), None)
        if owner not in (None, base, object):
            return None
    return base


def _fake(value: object, where: str, depth: int) -> str | None:
    """Where in ``value`` something is not a built-in value, or None."""
    kind = type(value)
    if kind in _SCALARS:
        return None
    if depth > _MAX_DEPTH:
        return f"{where}: nested deeper than {_MAX_DEPTH}"
    kind = _as_builtin(kind) or kind
    if kind in _SEQUENCES:
        assert isinstance(value, list | tuple | set | frozenset)
        for i, item in enumerate(value):
            if (found := _fake(item, f"{where}[{i}]", depth + 1)) is not None:
                return found
        return None
    if kind is dict:
        assert isinstance(value, dict)
        for n, (key, item) in enumerate(value.items()):
            # no repr of a key before it is known to be plain: a fake one's repr is its own code
            if (found := _fake(key, f"{where}'s key #{n + 1}", depth + 1)) is not None:
                return found
            if (found := _fake(item, f"{where}[{key!r:.40}]", depth + 1)) is not None:
                return found
        return None
    return f"{where} is a {kind.__module__}.{kind.__qualname__}, not a built-in value"


def plain(value: object) -> object:
    """``value`` itself when it is made of built-in values only (module docstring); else an
    AssertionError that says which part is not."""
    found = _fake(value, "the value", 0)
    if found is not None:
        raise AssertionError(f"{found}: its comparisons are its own code, so the test cannot trust them")
    return value
