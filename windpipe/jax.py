"""JAX batches of a plan: the same batches as torch's, as ``jax.Array`` s, without torch.

``from windpipe.jax import loader``::

    for batch in loader(plan, epoch=0):
        params, opt_state, loss = step(params, opt_state, batch.arrays())

:func:`loader` is :class:`JaxLoader` (``windpipe.sdk._jax``): ranks from
``jax.process_index()`` / ``jax.process_count()`` unless given, ``sharding=`` to place
each batch across devices, a bounded read-ahead thread on accelerators (on the CPU
with ``prefetch`` >= 1; else each batch is made when asked for), and ``state()`` /
``load_state()`` to resume mid-epoch (the torch dataset's state format). Needs
``windpipe[jax]``; importing this module imports neither jax (until a loader is made)
nor torch.
"""

from __future__ import annotations

from windpipe.sdk._jax import JaxAlignedBatch, JaxBatch, JaxLoader, JaxMissing

__all__ = ["JaxAlignedBatch", "JaxBatch", "JaxLoader", "JaxMissing", "loader"]

loader = JaxLoader
