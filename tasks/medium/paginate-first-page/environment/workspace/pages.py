"""Split a list into pages for the web listing."""


def paginate(items, page, per_page=10):
    """Items of page ``page`` (numbered from 1), at most ``per_page`` of them."""
    if page < 1:
        raise ValueError("pages are numbered from 1")
    start = page * per_page
    return items[start : start + per_page]


def page_count(items, per_page=10):
    return max(1, -(-len(items) // per_page))
