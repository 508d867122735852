"""tempotrain: the Python side of tempotrain's Python training functions.

A rank (Go) starts ``python3 -u -m tempotrain.train._rank``, which loads the
run's entrypoint and calls it; the function uses :mod:`tempotrain.train`, a
subset of Ray Train's API with the same names. See ../PROTOCOL.md.

Standard library only: torch is imported only by :mod:`tempotrain.train.torch`
and, lazily, by the runner.
"""

__version__ = "0.1.0"
