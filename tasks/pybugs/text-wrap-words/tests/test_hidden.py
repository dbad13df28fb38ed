import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest  # noqa: E402

from termfmt import boxed, wrap  # noqa: E402

LOREM = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod "
    "tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam,\n"
    "quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo "
    "consequat.\n\n\n"
    "Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore "
    "eu fugiat nulla pariatur.\n \t \n"
    "Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia "
    "deserunt mollit anim id est laborum. https://example.com/some/rather/long/url\n"
)


def paragraphs_of(text):
    paras, current = [], []
    for line in text.split("\n"):
        if line.strip():
            current.extend(line.split())
        elif current:
            paras.append(current)
            current = []
    if current:
        paras.append(current)
    return paras


def test_issue_example():
    assert plain(wrap("The quick brown fox jumps over the lazy dog", 10)) == (
        "The quick\nbrown fox\njumps over\nthe lazy\ndog"
    )


def test_paragraph_breaks_kept():
    text = "First paragraph here.\n\nSecond one\nspans two lines.\n\n\n  \nThird."
    assert plain(wrap(text, 16)) == (
        "First paragraph\nhere.\n\nSecond one spans\ntwo lines.\n\nThird."
    )
    assert plain(wrap("a\n \t\nb", 80)) == "a\n\nb"


def test_long_words_are_not_split():
    assert plain(wrap("see https://example.com/a/very/long/path now", 12)) == (
        "see\nhttps://example.com/a/very/long/path\nnow"
    )
    assert plain(wrap("a state-of-the-art parser", 10)) == "a\nstate-of-the-art\nparser"
    assert plain(wrap("abcdefghij", 3)) == "abcdefghij"


def test_blank_edges_and_empty_input():
    assert plain(wrap("\n\n  hello  \n\n", 10)) == "hello"
    assert plain(wrap("", 10)) == ""
    assert plain(wrap("   \n\n \t ", 10)) == ""


@pytest.mark.parametrize("width", [1, 5, 8, 13, 20, 33, 47, 80])
def test_greedy_fill_properties(width):
    out = wrap(LOREM, width)
    assert not plain(out.endswith("\n"))
    expected_paras = paragraphs_of(LOREM)
    blocks = out.split("\n\n")
    assert len(blocks) == len(expected_paras) == 3
    for block, words in zip(blocks, expected_paras):
        lines = block.split("\n")
        assert all(line == " ".join(line.split()) and line for line in lines), lines
        # words kept intact and in order
        assert plain([w for line in lines for w in line.split(" ")]) == plain(words)
        for line in lines:
            assert len(line) <= plain(width) or " " not in line, (width, line)
        # greedy: the next line's first word would not have fit
        for prev, nxt in zip(lines, lines[1:]):
            assert plain(len(prev) + 1 + len(nxt.split(" ")[0])) > plain(width), (prev, nxt)


def test_boxed_keeps_paragraphs():
    assert plain(boxed("hi there\n\nbye", 12)) == (
        "+----------+\n"
        "| hi there |\n"
        "|          |\n"
        "| bye      |\n"
        "+----------+"
    )
    assert plain(boxed("wrapping words nicely", 12)) == (
        "+----------+\n"
        "| wrapping |\n"
        "| words    |\n"
        "| nicely   |\n"
        "+----------+"
    )
