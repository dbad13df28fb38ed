"""Pause Python's cyclic garbage collector around bulk work on many records.

Loading and aggregating 100k episode records creates hundreds of thousands of objects that all
stay alive (records, their dicts, frame cells); each full collection rescans every one of them,
which took up to half of the aggregation time. Nothing here creates reference cycles that must be
collected promptly, so the collector waits until the bulk step ends; refcounting still frees
temporaries at once.
"""

import functools
import gc
from collections.abc import Callable


def gc_paused[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return wrapper
