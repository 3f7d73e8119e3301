"""The top of windpipe: the ``windpipe`` command (:mod:`windpipe.cli`) and the demo.

Everything below is a library; only this package may import all of them.
"""
