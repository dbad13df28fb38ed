#!/usr/bin/env bash
# Reference fix: transliterate via Unicode NFKD decomposition, turn every run
# of non-alphanumerics into one dash, and trim dashes (also after truncation).
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("blogengine/text.py")
src = path.read_text()

old_body = '''    slug = title.lower()
    slug = re.sub(r"[^a-z0-9\\s-]", "", slug)
    slug = re.sub(r"\\s", "-", slug)
    return slug[:max_length]
'''
new_body = '''    normalized = unicodedata.normalize("NFKD", title)
    ascii_text = normalized.encode("ascii", "ignore").decode("ascii")
    slug = ascii_text.lower()
    slug = re.sub(r"[^a-z0-9\\s-]", "", slug)
    slug = re.sub(r"[\\s-]+", "-", slug).strip("-")
    return slug[:max_length].rstrip("-")
'''
if new_body not in src:
    assert old_body in src, "unexpected blogengine/text.py"
    src = src.replace(old_body, new_body)
if "import unicodedata" not in src:
    src = src.replace("import re\n", "import re\nimport unicodedata\n", 1)
path.write_text(src)
PY
