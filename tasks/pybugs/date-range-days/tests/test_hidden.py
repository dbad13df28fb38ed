import os
import sys
import time

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

from decimal import Decimal  # noqa: E402

import pytest  # noqa: E402

from booking import Reservation, night_dates, nights_between  # noqa: E402

# POSIX TZ strings work without the system tz database.
ZONES = [
    "UTC0",
    "CET-1CEST,M3.5.0,M10.5.0/3",  # Europe/Berlin
    "EST5EDT,M3.2.0,M11.1.0",  # America/New_York
    "AEST-10AEDT,M10.1.0,M4.1.0/3",  # Australia/Sydney
]


@pytest.fixture(params=ZONES)
def local_tz(request):
    old = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    yield request.param
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


def test_simple_stays(local_tz):
    assert plain(nights_between("2024-05-10", "2024-05-12")) == 2
    assert plain(nights_between("2024-05-10", "2024-05-11")) == 1
    assert plain(nights_between("2024-05-01", "2024-05-08")) == 7


def test_month_and_year_boundaries(local_tz):
    assert plain(nights_between("2024-01-31", "2024-02-01")) == 1
    assert plain(nights_between("2024-02-28", "2024-03-01")) == 2  # leap year
    assert plain(nights_between("2023-02-28", "2023-03-01")) == 1
    assert plain(nights_between("2023-12-30", "2024-01-02")) == 3
    assert plain(nights_between("2024-01-01", "2025-01-01")) == 366


def test_dst_transitions(local_tz):
    # Europe: 2024-03-31 / 2024-10-27, US: 2024-03-10 / 2024-11-03,
    # Australia: 2024-04-07 / 2024-10-06
    assert plain(nights_between("2024-03-30", "2024-04-01")) == 2
    assert plain(nights_between("2024-10-26", "2024-10-28")) == 2
    assert plain(nights_between("2024-03-09", "2024-03-11")) == 2
    assert plain(nights_between("2024-11-02", "2024-11-04")) == 2
    assert plain(nights_between("2024-04-06", "2024-04-08")) == 2
    assert plain(nights_between("2024-10-05", "2024-10-07")) == 2
    assert plain(nights_between("2024-03-01", "2024-11-30")) == 274


def test_night_dates_exclude_checkout(local_tz):
    assert plain(night_dates("2024-05-10", "2024-05-12")) == ["2024-05-10", "2024-05-11"]
    assert plain(night_dates("2023-12-30", "2024-01-02")) == [
        "2023-12-30",
        "2023-12-31",
        "2024-01-01",
    ]
    assert plain(night_dates("2024-10-26", "2024-10-28")) == ["2024-10-26", "2024-10-27"]


def test_reservation_total(local_tz):
    r = Reservation("Ada", "2024-10-25", "2024-10-28", Decimal("89.50"))
    assert plain(r.nights) == 3
    assert plain(r.total()) == plain(Decimal("268.50"))
    assert plain(r.night_dates()) == ["2024-10-25", "2024-10-26", "2024-10-27"]


def test_invalid_input_still_rejected():
    with pytest.raises(ValueError):
        nights_between("2024-05-10", "2024-05-10")
    with pytest.raises(ValueError):
        nights_between("2024-05-12", "2024-05-10")
    with pytest.raises(ValueError):
        nights_between("2024-02-30", "2024-03-02")
    with pytest.raises(ValueError):
        nights_between("12/05/2024", "2024-05-14")
