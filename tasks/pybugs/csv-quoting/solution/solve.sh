#!/usr/bin/env bash
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("csvreport/writer.py")
src = path.read_text()

src = src.replace(
    "import datetime as dt\n",
    "import csv\nimport datetime as dt\nimport io\n",
    1,
)
old = '''    def _line(self, cells: list[str]) -> str:
        return ",".join(cells) + "\\n"
'''
new = '''    def _line(self, cells: list[str]) -> str:
        """Render one CSV record, quoting fields that contain , " or newlines."""
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\\n", quoting=csv.QUOTE_MINIMAL).writerow(cells)
        return buf.getvalue()
'''
assert old in src, "patch did not apply"
src = src.replace(old, new, 1)
src = src.replace(
    '        path.write_text(self.to_csv(), encoding="utf-8")\n',
    '        path.write_text(self.to_csv(), encoding="utf-8", newline="")\n',
    1,
)
path.write_text(src)
PY
