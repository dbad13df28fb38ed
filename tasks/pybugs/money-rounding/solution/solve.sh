#!/usr/bin/env bash
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("invoicing/core.py")
src = path.read_text()

src = src.replace(
    "from decimal import Decimal\n",
    "from decimal import ROUND_HALF_UP, Decimal\n",
    1,
)
src = src.replace(
    'CENT = Decimal("0.01")\n',
    'CENT = Decimal("0.01")\n\n\n'
    "def round_cents(amount: Decimal) -> Decimal:\n"
    '    """Round an amount to the cent, half up (commercial rounding)."""\n'
    "    return amount.quantize(CENT, rounding=ROUND_HALF_UP)\n",
    1,
)
src = src.replace(
    "        value = round(float(self.unit_price) * float(self.quantity), 2)\n"
    "        return Decimal(str(value)).quantize(CENT)\n",
    "        return self.unit_price * self.quantity\n",
    1,
)
src = src.replace(
    "        return sum((item.amount() for item in self.lines), Decimal(0)).quantize(CENT)\n",
    "        return round_cents(sum((item.amount() for item in self.lines), Decimal(0)))\n",
    1,
)
src = src.replace(
    "        value = round(float(self.subtotal()) * float(self.tax_rate), 2)\n"
    "        return Decimal(str(value)).quantize(CENT)\n",
    "        return round_cents(self.subtotal() * self.tax_rate)\n",
    1,
)
assert "float(self" not in src, "patch did not apply"
path.write_text(src)
PY
