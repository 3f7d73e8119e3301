"""The materializer: turns a stored plan's batch range into arrays (and Arrow record batches).

One importable library, used by the Flight server and usable by any in-process
reader: the byte-budgeted chunk cache (:mod:`.cache`), decoded and scaled chunks
(:mod:`.chunks`), a plan made ready to read (:mod:`.plan`), lane plans (:mod:`.lanes`),
the block and chunk read paths (:mod:`.read_paths`), batch assembly and provenance
(:mod:`.assembler`, :mod:`.provenance`), the builder that runs them (:mod:`.builder`)
and the ordered pipeline with read-ahead (:mod:`.pipeline`). No HTTP, no SQL, no gRPC
server.
"""

from windpipe.services.materialize.builder import BadSegmentPolicy, BatchBuilder, BuiltBatch
from windpipe.services.materialize.cache import CacheStats, ChunkCache, ChunkRequest
from windpipe.services.materialize.pipeline import BatchPipeline
from windpipe.services.materialize.plan import PlanContext

__all__ = [
    "BadSegmentPolicy",
    "BatchBuilder",
    "BatchPipeline",
    "BuiltBatch",
    "CacheStats",
    "ChunkCache",
    "ChunkRequest",
    "PlanContext",
]
