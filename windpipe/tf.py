"""TensorFlow: a plan's batches as a ``tf.data.Dataset``, the same as torch's, byte for byte.

::

    import windpipe.tf  # TensorFlow is imported on first use; torch never

    ds = plan.tf_dataset(rank=0, world_size=1)  # a WindpipeTFDataset
    for epoch in range(2):  # epochs may differ in length: one fit each
        ds.set_epoch(epoch)
        model.fit(ds.dataset().map(windpipe.tf.for_keras), initial_epoch=epoch,
                  epochs=epoch + 1, shuffle=False, callbacks=[ds.keras_callback()])

Each element is a dict of ``Batch``'s fields (an aligned plan's: a dict by protocol
each, plus ``has_data``); :func:`element_signature` is its exact ``output_signature``.
``set_epoch``, ``state_dict`` and ``load_state_dict`` resume as the torch dataset does.
See docs/sdk.md, "TensorFlow and Keras", and ``windpipe.sdk._tf``. Needs ``windpipe[tf]``.
"""

from __future__ import annotations

from windpipe.sdk._tf import TensorFlowMissing, WindpipeTFDataset, element_signature, for_keras

__all__ = ["TensorFlowMissing", "WindpipeTFDataset", "element_signature", "for_keras"]
