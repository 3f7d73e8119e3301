"""``windpipe synth``, ``upload`` and ``ingest`` (datasets written or copied), and
``windpipe demo`` (a synthetic dataset served, registered, split, planned and streamed)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Iterator

from pydantic import ValidationError

from windpipe.commands.common import CliError, settings_problem
from windpipe.services.settings import Settings

__all__ = ["CyclerChoices", "demo", "ingest", "synth", "upload"]


class CyclerChoices(Collection[str]):
    """``--cycler``'s choices: ``auto`` and the names of the ingest readers
    (:data:`windpipe.services.ingest.readers.READERS`, the one list), read when argparse first
    checks a value or writes the ingest help, so that building the parser imports no
    reader (polars: ``windpipe --help`` stays fast)."""

    def _names(self) -> tuple[str, ...]:
        from windpipe.services.ingest import READERS  # noqa: PLC0415

        return ("auto", *READERS)

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

def synth(args: argparse.Namespace) -> int:
    """Write a synthetic battery dataset to ``args.directory``."""
    from windpipe.services.synth import write_synthetic_dataset  # noqa: PLC0415

    result = write_synthetic_dataset(
        args.directory, cells=args.cells, cycles=args.cycles,
        rows_per_cycle=args.rows_per_cycle, seed=args.seed, zarr_fraction=args.zarr_fraction,
        hppc_every=args.hppc_every, eis_every=args.eis_every,
        missing_channel=args.missing_channel, missing_cells=args.missing_cells,
        missed_tests=args.missed_tests,
    )
    print(f"wrote {result.n_rows} rows in {result.n_segments} segments to {result.path}")
    print(f"manifest: {result.manifest_path}")
    return 0


def upload(args: argparse.Namespace) -> int:
    """Copy a local dataset folder into the object store, paths kept."""
    from windpipe.services.storage.store import Storage, StorageOptions  # noqa: PLC0415

    source = args.directory.resolve()
    if not source.is_dir():
        raise CliError(f"{args.directory} is not a folder")
    try:
        options = StorageOptions.from_settings(Settings())
    except ValidationError as exc:
        raise CliError(settings_problem(exc)) from None
    try:
        store = Storage.from_uri(args.destination, options)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    files = sorted(p for p in source.rglob("*") if p.is_file())
    total = 0
    for path in files:
        data = path.read_bytes()
        try:
            store.put(path.relative_to(source).as_posix(), data)
        except Exception as exc:  # obstore's errors: no bucket, refused, unreachable
            raise CliError(f"{path}: {exc}") from None
        total += len(data)
    print(f"uploaded {len(files)} files ({total} bytes) to {store.uri}")
    print(f"register it with root={store.uri!r}")
    return 0


def ingest(args: argparse.Namespace) -> int:
    """Turn cycler exports into segments and a manifest."""
    from windpipe.services.ingest import IngestError, ingest_exports  # noqa: PLC0415

    try:
        result = ingest_exports(args.inputs, args.out, cycler=args.cycler, set_id=args.set_id,
                                protocol=args.protocol, cell_pattern=args.cell_pattern,
                                overwrite=args.overwrite, on_bad_file=args.on_bad_file)
    except (IngestError, ImportError) as exc:
        print(f"windpipe ingest: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {result.n_rows} rows of {result.n_cells} cells in {result.n_segments} "
          f"segments to {result.path}\nregister: cat.register(NAME, "
          f"root={result.path.as_uri()!r}, manifest='manifest.parquet')")
    if result.skipped:
        print(f"skipped {len(result.skipped)} files (listed in ingest.json):")
        for item in result.skipped:
            print(f"  {item.file}: {item.reason}")
    return 0


def demo(args: argparse.Namespace) -> int:
    """Run the whole path end to end (:func:`windpipe.demo.run_demo`)."""
    from windpipe.demo import run_demo  # noqa: PLC0415

    run_demo(data_dir=args.data_dir, rows_per_cycle=args.rows_per_cycle, device=args.device)
    return 0
