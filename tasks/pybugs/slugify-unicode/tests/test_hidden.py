import os
import re
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest  # noqa: E402

from blogengine import Post, slugify  # noqa: E402


@pytest.mark.parametrize(
    "title, expected",
    [
        ("Café au lait", "cafe-au-lait"),
        ("Crème brûlée", "creme-brulee"),
        ("Año Nuevo", "ano-nuevo"),
        ("Ñandú", "nandu"),
        ("Ångström Über Alles", "angstrom-uber-alles"),
        ("Éléphant", "elephant"),
    ],
)
def test_accents_transliterated(title, expected):
    assert plain(slugify(title)) == plain(expected)


def test_decomposed_input_transliterated():
    # "e" followed by a combining acute accent (NFD form)
    assert plain(slugify("Cafe\u0301")) == "cafe"


@pytest.mark.parametrize(
    "title, expected",
    [
        ("Hello,  World!", "hello-world"),
        ("Rock & Roll ", "rock-roll"),
        ("  --Hello   World--  ", "hello-world"),
        ("a - b", "a-b"),
        ("Q & A: tips -- tricks", "q-a-tips-tricks"),
        ("Top 10 Python Tips", "top-10-python-tips"),
        ("tab\tand\nnewline", "tab-and-newline"),
    ],
)
def test_dashes_collapsed_and_stripped(title, expected):
    assert plain(slugify(title)) == plain(expected)


def test_empty_and_symbol_only_titles():
    assert plain(slugify("")) == ""
    assert plain(slugify("!!! ???")) == ""


def test_max_length_never_leaves_trailing_dash():
    assert plain(slugify("hello world again", max_length=11)) == "hello-world"
    assert plain(slugify("hello world again", max_length=12)) == "hello-world"
    assert plain(slugify("Café crème", max_length=5)) == "cafe"
    long_slug = slugify("word " * 40)
    assert len(long_slug) <= 60
    assert not plain(long_slug.endswith("-"))


def test_output_alphabet():
    slug = slugify("Ça va?  Très   bien — merci! (Ünïcödé) 2024")
    assert plain(slug) == "ca-va-tres-bien-merci-unicode-2024"
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", plain(slug))


def test_post_uses_fixed_slug():
    post = Post(title="Año Nuevo", body="¡Feliz año!")
    assert plain(post.slug) == "ano-nuevo"
    assert plain(post.url) == "/posts/ano-nuevo/"
