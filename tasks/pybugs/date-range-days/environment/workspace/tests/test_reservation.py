from decimal import Decimal

import pytest

from booking import Reservation, nights_between, parse_day


def test_parse_day_rejects_garbage():
    with pytest.raises(ValueError, match="expected YYYY-MM-DD"):
        parse_day("10/05/2024")


def test_checkout_before_checkin_rejected():
    with pytest.raises(ValueError):
        nights_between("2024-05-12", "2024-05-10")


def test_same_day_rejected():
    with pytest.raises(ValueError):
        nights_between("2024-05-10", "2024-05-10")


def test_negative_rate_rejected():
    with pytest.raises(ValueError):
        Reservation("Ada", "2024-05-10", "2024-05-12", Decimal("-1"))


def test_total_is_rate_times_nights():
    r = Reservation("Ada", "2024-05-10", "2024-05-12", Decimal("89.50"))
    assert r.total() == r.nightly_rate * r.nights
