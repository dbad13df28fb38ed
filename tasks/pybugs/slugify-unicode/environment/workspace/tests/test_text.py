from blogengine import Post, excerpt, slugify, word_count


def test_slugify_basic():
    assert slugify("Hello World") == "hello-world"
    assert slugify("Top 10 Python Tips") == "top-10-python-tips"


def test_slugify_max_length():
    assert slugify("abcdefghij", max_length=4) == "abcd"


def test_post_slug_and_url():
    post = Post(title="First Post", body="Hello there, reader.")
    assert post.slug == "first-post"
    assert post.url == "/posts/first-post/"


def test_explicit_slug_kept():
    assert Post(title="Whatever", body="", slug="custom").slug == "custom"


def test_excerpt_and_word_count():
    assert word_count("one two  three") == 3
    assert excerpt("a b c d", max_words=2) == "a b…"
    assert excerpt("a b", max_words=5) == "a b"
