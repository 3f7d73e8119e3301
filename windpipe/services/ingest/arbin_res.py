"""Arbin ``.res`` files (MITS Pro's result files: Microsoft Access databases), read by
galvani's ``res2sqlite`` through mdbtools' ``mdb-export``.

**Why this route.** A ``.res`` file is a Jet database; no Python library reads it by
itself. galvani (already the ``.mpr`` reader of the ``ingest`` extra) converts it table
by table with ``mdb-export``, the command-line tool of mdbtools (a system package:
``apt-get install mdbtools`` on Debian and Ubuntu, ``brew install mdbtools`` on macOS),
into an SQLite database; navani and cellpy read ``.res`` files the same way. Without
``mdb-export`` on the ``PATH`` the reader stops with :class:`MissingToolError`, which names the
package to install, before it touches a file.

**What is read.** The ``Channel_Normal_Table`` (one row per data point: ``Data_Point``,
``Test_Time``, ``Step_Index``, ``Cycle_Index``, ``Current``, ``Voltage``, ...), in
``Data_Point`` order, mapped as the Arbin CSV reader maps the same columns
(:mod:`windpipe.services.ingest.arbin`): the time is ``Test_Time`` (s), ``Current`` as
recorded (positive on charge), ``Voltage``, ``Step_Index`` the step, ``Cycle_Index``
counted from 0 (a further file of the cell continues after the previous file's last
cycle), and a row that repeats the previous one in all of them is dropped and counted
(``REPEATED``). The auxiliary channels (``Auxiliary_Table``: temperatures and the like)
are not read, so a ``.res`` time series has no ``temperature_c``. A file holding more
than one test (``Test_ID``) is refused: their times and cycles would overlap. So is a
file ``mdb-export`` reports errors for (a page it cannot read: a damaged or cut-short
file, which it would otherwise hand over in part).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from windpipe.services.ingest.arbin import arbin_frame, without_repeats
from windpipe.services.ingest.base import IngestError, Measurement, failed, quiet
from windpipe.services.ingest.checks import import_reader
from windpipe.services.ingest.continued import FilePart, read_in_turn

__all__ = ["MDB_EXPORT", "MissingToolError", "read_arbin_res"]

MDB_EXPORT = "mdb-export"
"""The mdbtools command galvani's ``res2sqlite`` runs to read each table."""

_JET = (b"Standard Jet DB", b"Standard ACE DB")
"""An Access database's signature, 4 bytes in (Jet: Access 97 to 2003, ACE: later)."""
_LIBRARY = "galvani (res2sqlite, mdb-export)"
_QUERY = ("SELECT Test_ID, Data_Point, Test_Time, Step_Index, Cycle_Index, Current, Voltage "
          "FROM Channel_Normal_Table ORDER BY Test_ID, Data_Point")


class MissingToolError(ImportError):
    """A command-line tool a reader needs is not installed (not the file's fault, so it
    is never a skipped file: ``windpipe ingest`` stops and says what to install)."""


def _require_mdb_export() -> None:
    if shutil.which(MDB_EXPORT) is None:
        raise MissingToolError(
            f"reading Arbin .res files needs {MDB_EXPORT} from mdbtools on the PATH: "
            "apt-get install mdbtools (Debian, Ubuntu), dnf install mdbtools (Fedora), "
            "brew install mdbtools (macOS)")


def _mdb_complaints(path: Path) -> list[str]:
    """What ``mdb-export`` writes to its standard error exporting the data table of
    ``path`` (a page it cannot read: it reports it and goes on). Run apart, with its own
    pipe, before galvani runs it again with the process's: galvani does not look."""
    done = subprocess.run([MDB_EXPORT, str(path), "Channel_Normal_Table"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False,
                          timeout=600)
    return done.stderr.decode(errors="replace").splitlines()


def _mdb_said(lines: Sequence[str]) -> str:
    """``mdb-export``'s first complaint, and how many more there were."""
    bad = [line for line in lines if line.startswith(("error:", "Error", "offset"))]
    if not bad:
        return ""
    more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
    return f"mdb-export said {bad[0]!r}{more}"


def _read_file(path: Path, first_cycle: int) -> FilePart:
    res2sqlite = import_reader("galvani.res2sqlite")
    pd = import_reader("pandas")
    with path.open("rb") as handle:
        magic = handle.read(4 + len(_JET[0]))[4:]
    if magic not in _JET:  # mdb-export exits quietly on such a file, galvani fails blindly
        raise IngestError(path, f"is no Access database (it begins {magic!r}, not with "
                                f"{_JET[0]!r} or {_JET[1]!r} after 4 bytes)")
    # mdb-export reports a page it cannot read and goes on; galvani does not look, so a
    # file cut short would be read in part, quietly
    if said := _mdb_said(_mdb_complaints(path)):
        raise IngestError(path, f"{_LIBRARY} could not read all of it ({said}): the file is "
                                "damaged or cut short")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            db = quiet(lambda: res2sqlite.convert_arbin_to_sqlite(str(path), None))
        try:
            raw = pd.read_sql_query(_QUERY, db)
        finally:
            db.close()
    except Exception as exc:
        raise failed(path, _LIBRARY, exc) from exc
    tests = sorted(int(t) for t in raw["Test_ID"].unique())
    if len(tests) > 1:
        raise IngestError(path, f"holds {len(tests)} tests (Test_ID {tests}); windpipe reads "
                                "a .res file of one test")
    return without_repeats(len(raw), arbin_frame(path, raw, first_cycle))


def read_arbin_res(files: Sequence[Path]) -> list[Measurement]:
    """The time series of one test's Arbin ``.res`` ``files`` (in order), every row of
    their ``Channel_Normal_Table`` either in the frame or counted in
    :attr:`Measurement.dropped` (see the module's docstring)."""
    _require_mdb_export()
    return read_in_turn(files, _read_file)
