"""What the windpipe packages share beneath the catalog, the Flight server and the SDK:
the wire contract (:mod:`windpipe.services.contract`), the planning core, the materializer,
storage, settings, logging and the database engine (``docs/architecture.md``).

Importing it changes nothing in the process: what a process sets before pyarrow loads
is its entry point's to set (:mod:`windpipe.services.runtime`).
"""
