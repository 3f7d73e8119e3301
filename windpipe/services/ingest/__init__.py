"""Cycler exports to normalized segments and a manifest (``windpipe ingest``).

The field's maintained readers do the reading (battery-data-toolkit for MACCOR and
batterydata.energy.gov CSV, pandas in its mapping for Arbin and BatteryArchive CSV,
galvani for BioLogic ``.mpr`` and, through mdbtools' ``mdb-export``, Arbin ``.res``,
NewareNDA for Neware ``.ndax`` and ``.nda``; the optional extra ``windpipe[ingest]``,
imported when a file is read); this package checks what they rely
on, names the file and row at fault, and writes one segment per cell, cycle and
protocol with the column names and units of ``windpipe.services.synth``. See docs/data.md.
"""

from windpipe.services.ingest.arbin_res import MissingToolError
from windpipe.services.ingest.base import UNITS, IngestError, Measurement
from windpipe.services.ingest.readers import READERS, Reader, detect_cycler, read_cell
from windpipe.services.ingest.writer import (
    PATTERN,
    IngestResult,
    OnBadFile,
    Skipped,
    ingest_exports,
)

__all__ = [
    "PATTERN",
    "READERS",
    "UNITS",
    "IngestError",
    "IngestResult",
    "Measurement",
    "MissingToolError",
    "OnBadFile",
    "Reader",
    "Skipped",
    "detect_cycler",
    "ingest_exports",
    "read_cell",
]
