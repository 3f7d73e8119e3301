"""Masked losses that cannot turn NaN (``windpipe.sdk.losses``): index with ``target_valid`` first.

``from windpipe.losses import masked_mse``; the same as the batch methods
``batch.masked_mse(pred)`` and ``batch.masked_mae(pred)`` (a :class:`~windpipe.Batch`
takes a tensor, an :class:`~windpipe.AlignedBatch` ``{protocol: tensor}``); ``None``
when the batch has no valid target.
"""

from windpipe.sdk.losses import Reduction, masked_error, masked_mae, masked_mse

__all__ = ["Reduction", "masked_error", "masked_mae", "masked_mse"]
