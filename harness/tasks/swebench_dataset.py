"""SWE-bench rows from the Hugging Face hub (or a local parquet file) through the ``datasets`` library.

``--tasks swe-bench-verified`` / ``swe-bench-lite`` / ``swe-bench`` name the official datasets;
``--tasks hf:OWNER/NAME[@SPLIT]`` any other with the same columns (split ``test`` by default). The
library caches what it downloads (``HF_HOME``; ``HF_HUB_OFFLINE=1`` reads the cache only), and the
rows are written once as a JSONL file under the harness cache, which then loads as any instance
file does (swebench.py). A local ``.parquet`` file of rows loads the same way; a local ``.jsonl``
needs none of this.
"""

import json
import re
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.paths import cache_dir

ALIASES = {
    "swe-bench-verified": "SWE-bench/SWE-bench_Verified",
    "swe-bench-lite": "SWE-bench/SWE-bench_Lite",
    "swe-bench": "SWE-bench/SWE-bench",
}
_HUB = re.compile(r"hf:([\w.-]+/[\w.-]+)(?:@([\w.-]+))?")


def hub_dataset(name: str) -> tuple[str, str, str] | None:
    """(hub name, split, file stem) when ``--tasks`` names a dataset, else None."""
    if name in ALIASES:
        return ALIASES[name], "test", name
    if m := _HUB.fullmatch(name):
        split = m.group(2) or "test"
        return m.group(1), split, f"{m.group(1).replace('/', '__')}-{split}"
    return None


def _write(rows: Any, stem: str) -> Path:
    """The rows as JSONL under the cache; rewritten only when they changed (the suite's cache keys on it)."""
    out = cache_dir() / "swebench" / "datasets" / f"{stem}.jsonl"
    text = "".join(json.dumps(dict(row), default=str) + "\n" for row in rows)
    if not text:
        raise HarnessError(f"--tasks {stem}: the dataset has no rows")
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.is_file() or out.read_text() != text:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(out)
    return out


def _load(*args: Any, where: str, **kw: Any) -> Any:
    try:
        import datasets
    except ImportError:
        raise HarnessError(
            f"--tasks {where}: SWE-bench datasets load with the datasets library: pip install 'harness[swebench]'"
        ) from None
    try:
        return datasets.load_dataset(*args, **kw)
    except Exception as exc:  # offline and not cached, no such dataset or split, a bad file
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise HarnessError(
            f"--tasks {where}: the datasets library could not load it ({type(exc).__name__}: {first}); "
            "a local .jsonl or .parquet of its rows works too"
        ) from None


def dataset_jsonl(name: str) -> Path:
    """The JSONL file of the rows of the dataset ``name`` names (hub_dataset)."""
    found = hub_dataset(name)
    assert found is not None
    hub, split, stem = found
    return _write(_load(hub, split=split, where=name), stem)


def parquet_jsonl(path: Path) -> Path:
    """The JSONL file of a local parquet file's rows."""
    rows = _load("parquet", data_files=str(path), split="train", where=str(path))
    return _write(rows, path.stem)
