from pathlib import Path

# The fix must read the file as CSV, not patch the data.
assert Path("/app/data/orders.csv").read_text().count('"') == 6
