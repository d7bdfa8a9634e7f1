"""Write the table of where each operator runs into docs/operators.md (from the operators'
``runs_on`` and ``device_note``): ``python tools/operator_devices.py``."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tabloader.ops.devices import with_device_table  # noqa: E402

docs = pathlib.Path(__file__).resolve().parents[1] / "docs" / "operators.md"
docs.write_text(with_device_table(docs.read_text()))
