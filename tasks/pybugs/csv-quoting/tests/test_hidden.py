import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import csv
import datetime as dt
import io

from csvreport import Column, Report


def parse(text):
    return list(csv.reader(io.StringIO(text, newline="")))


def test_comma_is_quoted():
    report = Report(["id", "customer"])
    report.add_row({"id": 1, "customer": "Smith, John"})
    assert plain(report.to_csv()) == 'id,customer\n1,"Smith, John"\n'


def test_quotes_are_doubled():
    report = Report(["id", "note"])
    report.add_row({"id": 2, "note": 'He said "hi"'})
    report.add_row({"id": 3, "note": '"'})
    assert plain(report.to_csv()) == 'id,note\n2,"He said ""hi"""\n3,""""\n'


def test_issue_example_round_trips():
    report = Report(["id", "customer", "note"])
    report.add_row({"id": 1, "customer": "Smith, John", "note": 'said "call me"'})
    assert plain(parse(report.to_csv())) == [
        ["id", "customer", "note"],
        ["1", "Smith, John", 'said "call me"'],
    ]


def test_many_special_values_round_trip():
    values = [
        "plain",
        "a,b,c",
        '"quoted"',
        'mixed, "both"',
        "line one\nline two",
        "  padded  ",
        "",
        "trailing,",
    ]
    report = Report([Column("v", "value"), Column("n", "n")])
    for i, v in enumerate(values):
        report.add_row({"v": v, "n": i})
    rows = parse(report.to_csv())
    assert plain(rows[0]) == ["value", "n"]
    assert plain(rows[1:]) == plain([[v, str(i)] for i, v in enumerate(values)])


def test_header_with_comma_is_quoted():
    report = Report([Column("amount", "Amount, EUR"), Column("who", 'The "owner"')])
    report.add_row({"amount": 2.5, "who": "me"})
    assert plain(report.to_csv()) == '"Amount, EUR","The ""owner"""\n2.50,me\n'


def test_formatter_output_is_quoted_too():
    report = Report([Column("total", "Total", formatter=lambda v: f"{v:,.2f}")])
    report.add_row({"total": 1234.5})
    report.add_row({"total": 7})
    text = report.to_csv()
    assert plain(text) == 'Total\n"1,234.50"\n7.00\n'
    assert plain(parse(text)[1:]) == [["1,234.50"], ["7.00"]]


def test_plain_rows_unchanged():
    report = Report(["id", "customer", "due", "paid", "missing"])
    report.add_row({"id": 17, "customer": "ACME", "due": dt.date(2024, 5, 1), "paid": True})
    assert plain(report.to_csv()) == "id,customer,due,paid,missing\n17,ACME,2024-05-01,yes,\n"
    assert "\r" not in plain(report.to_csv())


def test_save_round_trips(tmp_path):
    report = Report(["id", "customer", "note"])
    rows = [
        {"id": "1", "customer": "Smith, John", "note": 'said "call me"'},
        {"id": "2", "customer": "Müller & Söhne", "note": "first line\nsecond line"},
    ]
    report.extend(rows)
    path = report.save(tmp_path / "export.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        assert plain(list(csv.DictReader(fh))) == plain(rows)
