import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

from words import word_counts


def test_case_and_punctuation():
    counts = word_counts("The cat saw the dog.")
    assert plain(counts["the"]) == 2 and plain(counts["dog"]) == 1
    assert "The" not in counts and "dog." not in counts


def test_quotes_and_empty():
    # a Counter is a fine answer: its items are compared as a plain dict
    assert plain(dict(word_counts('"Hi," she said; "hi!"'))) == {"hi": 2, "she": 1, "said": 1}
    assert plain(dict(word_counts(""))) == {}
