"""BLAS thread limiting for the matrix-mechanism kernels.

The kernels here are O(n^3) eigen/Cholesky solves and many small rank-2/rank-4 updates; on a shared
2-core machine a multi-threaded OpenBLAS thrashes on them (an n = 1024 eigvalsh went from 0.26 s on one
thread to 8.7 s on two under load).  Every public entry point runs under ``blas_limit()``, which caps the
BLAS pools at ``LDP_MATRIX_BLAS_THREADS`` threads (default 1) and restores them on exit.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

from threadpoolctl import ThreadpoolController

__all__ = ["blas_limit", "limited"]

_controller: ThreadpoolController | None = None
_state = threading.local()


@contextlib.contextmanager
def blas_limit():
    """Context manager capping BLAS threads at $LDP_MATRIX_BLAS_THREADS (default 1).

    The library discovery of threadpoolctl costs ~10 ms, so one controller is kept per process and
    nested uses are free.
    """
    global _controller
    depth = getattr(_state, "depth", 0)
    if depth:
        _state.depth = depth + 1
        try:
            yield
        finally:
            _state.depth -= 1
        return
    if _controller is None:
        _controller = ThreadpoolController()
    with _controller.limit(limits=int(os.environ.get("LDP_MATRIX_BLAS_THREADS", "1")), user_api="blas"):
        _state.depth = 1
        try:
            yield
        finally:
            _state.depth = 0


def limited(fn):
    """Decorator: run ``fn`` under :func:`blas_limit`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with blas_limit():
            return fn(*args, **kwargs)

    return wrapper
