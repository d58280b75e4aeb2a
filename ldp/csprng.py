"""Cryptographic randomness for real clients: a ``numpy.random.Generator`` over the OS CSPRNG.

Perturbation noise decides what a report reveals, so a real client draws it from a cryptographic source:
:func:`secure_rng` returns a :class:`SecureGenerator`, a ``numpy.random.Generator`` whose bits come from
``os.urandom`` (the kernel's CSPRNG; ``getrandom(2)`` on Linux). Nobody can replay or predict the noise
from a seed, a copied state or published outputs, because there is no state to seed, copy or recover.

Two layers:

* :class:`OSRandomBits` is the bit source: it fills numpy's ``bitgen_t`` interface (a ``BitGenerator``
  capsule) with ``ctypes`` callbacks that serve 64-bit words from a block of ``os.urandom`` bytes. Every
  ``Generator`` method works on it (normal, choice, permutation, ...), at the speed of a Python callback
  per word (about 0.4 us). The block is discarded in a forked child (``os.register_at_fork``), so a
  parent and its children never share noise.
* :class:`SecureGenerator` overrides the methods the encoders draw in bulk -- ``random``, ``integers``
  (scalar bounds) and ``bytes`` -- with vectorized versions that read ``8 n`` (or ``4 n``) bytes of
  ``os.urandom`` at once and map them with numpy: ``random`` is ``(w >> 11) * 2**-53`` as numpy's own
  ``next_double``; ``integers`` masks each word to the range's bit length and redraws the words above it
  (unbiased rejection; at most half are redrawn). Other calls fall back to the ``Generator`` methods
  over :class:`OSRandomBits`: same source, slower.

Simulations and tests keep explicit seeded generators (``numpy.random.default_rng(seed)``, PCG64):
:func:`client_rng` maps ``rng=None`` to :func:`secure_rng` and anything else to
``numpy.random.default_rng(rng)``, which is what every encoder's ``rng`` argument means.

A ``SecureGenerator`` cannot be seeded, has no ``state`` and pickles (or copies) as a *new*, independent
generator; ``spawn(n)`` returns ``n`` new ones.
"""

from __future__ import annotations

import ctypes
import operator
import os
import sys
import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["OSRandomBits", "SecureGenerator", "secure_rng", "client_rng"]

#: Bytes of ``os.urandom`` read per refill of the per-word callback path.
BLOCK_BYTES = 4096

_U64_FN = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p)
_U32_FN = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_void_p)
_DOUBLE_FN = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p)


class _BitgenT(ctypes.Structure):
    """numpy's ``bitgen_t`` (``numpy/random/bitgen.h``)."""

    _fields_ = [
        ("state", ctypes.c_void_p),
        ("next_uint64", _U64_FN),
        ("next_uint32", _U32_FN),
        ("next_double", _DOUBLE_FN),
        ("next_raw", _U64_FN),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_SOURCES: weakref.WeakSet[OSRandomBits] = weakref.WeakSet()


def _forget_in_child() -> None:
    for src in list(_SOURCES):
        src._discard()


os.register_at_fork(after_in_child=_forget_in_child)

_DOUBLE_SCALE = 1.0 / 9007199254740992.0  # 2**-53
_FLOAT_SCALE = np.float32(1.0 / 16777216.0)  # 2**-24


def _entropy_failed(exc: BaseException) -> None:
    """A failure inside a ctypes callback cannot raise into numpy (ctypes would return 0 and carry on):
    a generator that cannot read the OS CSPRNG stops the process rather than emit predictable noise."""
    sys.stderr.write(f"ldp.csprng: cannot read the OS CSPRNG ({exc!r}); aborting\n")
    sys.stderr.flush()
    os.abort()


class OSRandomBits:
    """A numpy bit source reading ``os.urandom`` in blocks of :data:`BLOCK_BYTES` (see the module
    docstring). It has the two attributes ``numpy.random.Generator`` takes from a bit generator,
    ``capsule`` and ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # numpy's Generator holds it around its draws
        self._buf_lock = threading.Lock()  # the word block (the callbacks run while ``lock`` is held)
        self._words: list[int] = []
        self._pos = 0
        self._fn64 = _U64_FN(self._next_uint64)
        self._fn32 = _U32_FN(self._next_uint32)
        self._fnd = _DOUBLE_FN(self._next_double)
        self._bitgen = _BitgenT(None, self._fn64, self._fn32, self._fnd, self._fn64)
        self.capsule = _capsule_new(ctypes.addressof(self._bitgen), b"BitGenerator", None)
        _SOURCES.add(self)

    def __repr__(self) -> str:
        return "OSRandomBits()"

    def __reduce__(self) -> tuple[Any, tuple]:
        return (OSRandomBits, ())  # a copy is a new source: never the same bits twice

    def _discard(self) -> None:
        self._words, self._pos = [], 0
        self._buf_lock = threading.Lock()  # a lock held by another thread at fork stays held in the child

    def _word(self) -> int:
        with self._buf_lock:
            if self._pos >= len(self._words):
                self._words = np.frombuffer(os.urandom(BLOCK_BYTES), dtype=np.uint64).tolist()
                self._pos = 0
            w = self._words[self._pos]
            self._pos += 1
            return w

    def _next_uint64(self, _state: Any) -> int:
        try:
            return self._word()
        except BaseException as exc:  # noqa: BLE001 - see _entropy_failed
            _entropy_failed(exc)
            raise

    def _next_uint32(self, _state: Any) -> int:
        return self._next_uint64(_state) >> 32

    def _next_double(self, _state: Any) -> float:
        return (self._next_uint64(_state) >> 11) * _DOUBLE_SCALE

    def random_raw(self, size: int | tuple[int, ...] | None = None) -> int | np.ndarray:
        """Raw 64-bit words straight from ``os.urandom`` (one ``int`` when ``size`` is None)."""
        if size is None:
            return int(np.frombuffer(os.urandom(8), dtype=np.uint64)[0])
        shape = _shape(size)
        return _words(int(np.prod(shape)), np.uint64).reshape(shape)

    def spawn(self, n_children: int) -> list[OSRandomBits]:
        """``n_children`` new, independent sources."""
        return [OSRandomBits() for _ in range(int(n_children))]


def _shape(size: Any) -> tuple[int, ...]:
    shape = (operator.index(size),) if np.ndim(size) == 0 else tuple(operator.index(s) for s in size)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimensions are not allowed: {shape}")
    return shape


def _words(n: int, dtype: type[np.unsignedinteger]) -> np.ndarray:
    """``n`` uniform words of ``dtype`` (uint32 or uint64) read from ``os.urandom`` at once."""
    itemsize = np.dtype(dtype).itemsize
    return np.frombuffer(os.urandom(itemsize * n), dtype=dtype).copy()


def _bounded(r: int, n: int) -> np.ndarray:
    """``n`` uniform integers in ``[0, r]`` (``0 <= r < 2**64``) as uint64: words masked to the bit
    length of ``r``, the ones above ``r`` redrawn (unbiased; each is kept with probability > 1/2)."""
    if r == 0:
        return np.zeros(n, dtype=np.uint64)
    wdt = np.uint32 if r < 1 << 32 else np.uint64
    if r == np.iinfo(wdt).max:
        return _words(n, wdt).astype(np.uint64, copy=False)
    mask = wdt((1 << r.bit_length()) - 1)
    top = wdt(r)
    out = _words(n, wdt) & mask
    todo = np.flatnonzero(out > top)
    while todo.size:
        w = _words(todo.size, wdt) & mask
        out[todo] = w
        todo = todo[w > top]
    return out.astype(np.uint64, copy=False)


class SecureGenerator(np.random.Generator):
    """A ``numpy.random.Generator`` over :class:`OSRandomBits` with vectorized ``random``, ``integers``
    and ``bytes`` (see the module docstring). Build it with :func:`secure_rng`."""

    def __init__(self, bit_generator: OSRandomBits | None = None) -> None:
        super().__init__(OSRandomBits() if bit_generator is None else bit_generator)

    def __repr__(self) -> str:
        return "SecureGenerator(OSRandomBits)"

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, tuple]:
        return (SecureGenerator, ())  # a copy is a new generator: never the same noise twice

    def spawn(self, n_children: int) -> list[SecureGenerator]:  # type: ignore[override]
        """``n_children`` new, independent generators."""
        return [SecureGenerator() for _ in range(int(n_children))]

    def bytes(self, length: int) -> bytes:  # type: ignore[override]
        return os.urandom(operator.index(length))

    def random(self, size: Any = None, dtype: Any = np.float64, out: np.ndarray | None = None) -> Any:  # type: ignore[override]
        dt = np.dtype(dtype)
        if out is not None or dt not in (np.dtype(np.float64), np.dtype(np.float32)):
            return super().random(size, dtype=dtype, out=out)  # numpy's checks and ``out`` handling
        shape = () if size is None else _shape(size)
        n = int(np.prod(shape))
        if dt == np.float64:
            vals = (_words(n, np.uint64) >> np.uint64(11)) * _DOUBLE_SCALE
        else:
            vals = (_words(n, np.uint32) >> np.uint32(8)).astype(np.float32) * _FLOAT_SCALE
        return float(vals[0]) if size is None and dt == np.float64 else vals.reshape(shape)[()]

    def integers(  # type: ignore[override]
        self, low: Any, high: Any = None, size: Any = None, dtype: Any = np.int64, endpoint: bool = False
    ) -> Any:
        dt = np.dtype(dtype)
        fast = dt.kind in "iu" and np.ndim(low) == 0 and np.ndim(high) == 0
        if fast:
            try:
                lo, hi = operator.index(low), None if high is None else operator.index(high)
            except TypeError:
                fast = False
        if fast:
            lo, hi = (0, lo) if hi is None else (lo, hi)
            top = hi if endpoint else hi - 1
            info = np.iinfo(dt)
            fast = info.min <= lo <= top <= info.max
        if not fast:  # array or float bounds, bool, bad bounds: numpy's own method (and error messages)
            return super().integers(low, high, size=size, dtype=dtype, endpoint=endpoint)
        shape = () if size is None else _shape(size)
        draws = _bounded(top - lo, int(np.prod(shape)))
        with np.errstate(over="ignore"):
            vals = draws + np.uint64(lo % (1 << 64))
        vals = (vals.view(np.int64) if dt.kind == "i" else vals).astype(dt, copy=False)
        return dt.type(vals[0]) if size is None else vals.reshape(shape)


def secure_rng() -> SecureGenerator:
    """A new generator over the OS CSPRNG: what a real client draws its perturbation noise from."""
    return SecureGenerator()


def client_rng(rng: np.random.Generator | np.random.SeedSequence | int | None) -> np.random.Generator:
    """The generator an encoder uses for its ``rng`` argument: ``None`` (a real client) gives
    :func:`secure_rng`; a seed, ``SeedSequence`` or ``Generator`` (a simulation) gives
    ``numpy.random.default_rng(rng)`` (a given ``Generator`` is used as is)."""
    return secure_rng() if rng is None else np.random.default_rng(rng)
