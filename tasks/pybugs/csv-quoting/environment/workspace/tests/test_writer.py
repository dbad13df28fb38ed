import datetime as dt

from csvreport import Column, Report, format_value


def test_basic_report():
    report = Report([Column("id", "ID"), Column("customer", "Customer"), "due", "paid"])
    report.add_row({"id": 17, "customer": "ACME", "due": dt.date(2024, 5, 1), "paid": True})
    report.add_row({"id": 18, "customer": "Initech", "due": dt.date(2024, 5, 3), "paid": False})
    assert report.to_csv() == (
        "ID,Customer,due,paid\n"
        "17,ACME,2024-05-01,yes\n"
        "18,Initech,2024-05-03,no\n"
    )


def test_missing_values_are_empty():
    report = Report(["a", "b"])
    report.add_row({"a": 1})
    assert report.to_csv() == "a,b\n1,\n"


def test_format_value():
    assert format_value(None) == ""
    assert format_value(2.5) == "2.50"
    assert format_value(False) == "no"


def test_save(tmp_path):
    report = Report(["name"])
    report.add_row({"name": "x"})
    path = report.save(tmp_path / "r.csv")
    assert path.read_text(encoding="utf-8") == "name\nx\n"
