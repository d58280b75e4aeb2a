"""Exact discrete Gaussian noise and its accounting (Canonne, Kamath & Steinke, "The Discrete Gaussian for
Differential Privacy", NeurIPS 2020).

Sampling is exact: every step is integer arithmetic on uniform integers (no floating point), following
the paper's algorithms:

* :func:`bernoulli_exp` -- Bernoulli(exp(-gamma)) for a rational gamma >= 0: for gamma in [0, 1], draw
  Bernoulli(gamma / k) for k = 1, 2, ... until one fails and answer "the failing k is odd"; a larger gamma
  is floor(gamma) Bernoulli(exp(-1)) trials and one for the fraction;
* :func:`discrete_laplace` -- P(x) proportional to exp(-|x| / t) for an integer t >= 1: a uniform
  remainder accepted with probability exp(-U / t), a geometric number of whole t's, a sign (rejecting -0);
* :func:`discrete_gaussian` -- N_Z(0, sigma^2), P(x) proportional to exp(-x^2 / (2 sigma^2)) for a
  rational sigma^2: discrete Laplace proposals with t = floor(sigma) + 1, accepted with probability
  exp(-(|y| - sigma^2 / t)^2 / (2 sigma^2)).

Randomness is a :class:`RandomSource` (``randbelow``): :class:`OsRandom` (the OS CSPRNG through
``secrets``) or :class:`PrfStream` (SHAKE-256 keyed by a secret key and a context: the same key and context
give the same draws, so a release can be reproduced bit for bit by whoever holds the key).

Accounting: adding N_Z(0, s_i^2) independently to integer queries q_i is rho-zCDP with
rho = max over neighbours of sum_i (q_i(x) - q_i(x'))^2 / (2 s_i^2) (CKS, Sec. 2-3: the Renyi divergence of
discrete Gaussians at an integer shift is at most that of the continuous ones, and divergences of
independent coordinates add). rho-zCDP implies (eps, delta)-DP with
delta = exp((a - 1)(a rho - eps) + a ln(1 - 1/a)) / (a - 1) for every a > 1 (CKS, Cor. 13);
:func:`zcdp_delta` minimises over a numerically, and any a gives a valid bound, so a slightly missed
minimum only makes it conservative.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import stat
from fractions import Fraction
from pathlib import Path
from typing import Protocol

import numpy as np

__all__ = [
    "RandomSource",
    "OsRandom",
    "PrfStream",
    "bernoulli_exp",
    "discrete_laplace",
    "discrete_gaussian",
    "sample",
    "variance",
    "pmf",
    "zcdp_delta",
    "zcdp_rho",
    "zcdp_epsilon",
    "rational",
    "NOISE_KEY_BYTES",
    "load_or_create_key",
]

#: Bytes of a noise key (SHAKE-256 keyed by 256 bits).
NOISE_KEY_BYTES = 32


class RandomSource(Protocol):
    """Uniform integers: ``randbelow(n)`` in ``[0, n)`` for an integer ``n >= 1``."""

    name: str

    def randbelow(self, n: int) -> int: ...


class OsRandom:
    """The OS CSPRNG (``secrets.randbelow``)."""

    name = "os_csprng"

    def randbelow(self, n: int) -> int:
        return secrets.randbelow(n)


class PrfStream:
    """A deterministic stream of uniform integers: SHAKE-256 of (key, context, block number), read in
    blocks of 64 KiB; ``randbelow`` by rejection on the fewest whole bytes that hold ``n - 1``.

    With a secret 256-bit key this is a PRF: without the key the stream is indistinguishable from uniform;
    with the key and the context anyone can recompute it.
    """

    name = "keyed_prf"
    _BLOCK = 1 << 16

    def __init__(self, key: bytes, context: bytes) -> None:
        if not isinstance(key, bytes) or len(key) < 16:
            raise ValueError("a PRF key must be at least 16 bytes")
        ctx = hashlib.sha256(context).digest()
        self._prefix = b"ldp-dgauss-prf-v1" + len(key).to_bytes(2, "big") + key + ctx
        self._block = 0
        self._buf = b""
        self._pos = 0

    def _take(self, k: int) -> bytes:
        if self._pos + k > len(self._buf):
            rest = self._buf[self._pos :]
            nxt = hashlib.shake_256(self._prefix + self._block.to_bytes(8, "big")).digest(self._BLOCK)
            self._block += 1
            self._buf, self._pos = rest + nxt, 0
        out = self._buf[self._pos : self._pos + k]
        self._pos += k
        return out

    def randbelow(self, n: int) -> int:
        if n < 1:
            raise ValueError(f"randbelow needs n >= 1, got {n}")
        if n == 1:
            return 0
        bits = (n - 1).bit_length()
        nbytes = (bits + 7) // 8
        shift = 8 * nbytes - bits
        while True:
            r = int.from_bytes(self._take(nbytes), "big") >> shift
            if r < n:
                return r


# ------------------------------------------------------------------------------------------------------------
# exact samplers
# ------------------------------------------------------------------------------------------------------------


def bernoulli_exp(num: int, den: int, src: RandomSource) -> bool:
    """Bernoulli(exp(-num / den)) exactly, for integers ``num >= 0``, ``den >= 1``."""
    if num < 0 or den < 1:
        raise ValueError(f"bernoulli_exp needs num >= 0 and den >= 1, got {num}/{den}")
    while num > den:  # exp(-gamma) = exp(-1)^floor * exp(-rest)
        if not bernoulli_exp(1, 1, src):
            return False
        num -= den
    k = 1
    while src.randbelow(den * k) < num:  # A_k ~ Bernoulli(gamma / k) succeeded
        k += 1
    return k % 2 == 1


def discrete_laplace(t: int, src: RandomSource) -> int:
    """P(x) proportional to exp(-|x| / t) on the integers, for an integer scale ``t >= 1``."""
    if t < 1:
        raise ValueError(f"discrete_laplace needs an integer scale t >= 1, got {t}")
    while True:
        u = src.randbelow(t)
        if not bernoulli_exp(u, t, src):
            continue
        v = 0
        while bernoulli_exp(1, 1, src):
            v += 1
        x = u + t * v
        neg = src.randbelow(2) == 1
        if neg and x == 0:
            continue
        return -x if neg else x


def rational(sigma2: Fraction | int | float) -> Fraction:
    """``sigma2`` as an exact positive Fraction (a float is taken at its exact binary value)."""
    q = Fraction(sigma2)
    if q <= 0:
        raise ValueError(f"sigma^2 must be positive, got {sigma2}")
    return q


def discrete_gaussian(sigma2: Fraction, src: RandomSource) -> int:
    """One draw of N_Z(0, sigma2), P(x) proportional to exp(-x^2 / (2 sigma2)), for a rational sigma2 > 0."""
    q = rational(sigma2)
    n, d = q.numerator, q.denominator
    t = math.isqrt(n // d) + 1  # floor(sigma) + 1
    den = 2 * n * d * t * t
    while True:
        y = discrete_laplace(t, src)
        # gamma = (|y| - sigma2 / t)^2 / (2 sigma2) = (|y| t d - n)^2 / (2 n d t^2)
        if bernoulli_exp((abs(y) * t * d - n) ** 2, den, src):
            return y


def sample(sigma2: Fraction, size: int, src: RandomSource) -> np.ndarray:
    """``size`` independent draws of N_Z(0, sigma2) as int64."""
    q = rational(sigma2)
    return np.fromiter((discrete_gaussian(q, src) for _ in range(int(size))), dtype=np.int64, count=int(size))


# ------------------------------------------------------------------------------------------------------------
# closed forms
# ------------------------------------------------------------------------------------------------------------


def _support(s2: float) -> np.ndarray:
    r = int(math.ceil(40.0 * math.sqrt(s2))) + 2  # exp(-800) is below every double's resolution
    return np.arange(-r, r + 1, dtype=np.float64)


def pmf(x: np.ndarray | int, sigma2: Fraction | float) -> np.ndarray:
    """P(X = x) of N_Z(0, sigma2) (float; normalised over |x| <= 40 sigma + 2)."""
    s2 = float(sigma2)
    z = np.exp(-(_support(s2) ** 2) / (2 * s2)).sum()
    xs = np.asarray(x, dtype=np.float64)
    return np.exp(-(xs**2) / (2 * s2)) / z


def variance(sigma2: Fraction | float) -> float:
    """Var N_Z(0, sigma2) = sum x^2 e^{-x^2/2s^2} / sum e^{-x^2/2s^2}, slightly below sigma2.

    Direct sums for sigma2 < 1; from 1 on, the Poisson-summation (theta) form
    sigma2 (1 + 2 sum_k (1 - 4 pi^2 sigma2 k^2) q^(k^2)) / (1 + 2 sum_k q^(k^2)), q = exp(-2 pi^2 sigma2),
    with k = 1..3 (the k = 4 term is below e^-315 there).
    """
    s2 = float(sigma2)
    if s2 < 1.0:
        x = _support(s2)
        w = np.exp(-(x**2) / (2 * s2))
        return float((x**2 * w).sum() / w.sum())
    k = np.arange(1, 4, dtype=np.float64)
    q = np.exp(-2 * math.pi**2 * s2 * k**2)
    return float(s2 * (1 + 2 * np.sum((1 - 4 * math.pi**2 * s2 * k**2) * q)) / (1 + 2 * np.sum(q)))


# ------------------------------------------------------------------------------------------------------------
# accounting: zCDP -> (eps, delta)
# ------------------------------------------------------------------------------------------------------------


def _log_delta_at(alpha: float, rho: float, eps: float) -> float:
    return (alpha - 1) * (alpha * rho - eps) + alpha * math.log1p(-1.0 / alpha) - math.log(alpha - 1)


def zcdp_delta(rho: float, eps: float) -> float:
    """Smallest delta (up to the minimisation) with rho-zCDP => (eps, delta)-DP (CKS, Cor. 13).

    The bound holds at every alpha > 1; alpha is found by bisection on the derivative of the log-bound,
    (2 alpha - 1) rho - eps + ln(1 - 1/alpha), and the bound evaluated there (times 1 + 1e-9 against
    rounding)."""
    if not (rho >= 0 and eps >= 0 and math.isfinite(rho) and math.isfinite(eps)):
        raise ValueError(f"zcdp_delta needs rho >= 0 and eps >= 0 (finite), got {rho}, {eps}")
    if rho == 0:
        return 0.0
    lo, hi = 1.0 + 1e-9, max(2.0, (eps + 1) / (2 * rho) + 2)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if (2 * mid - 1) * rho - eps + math.log1p(-1.0 / mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    a = 0.5 * (lo + hi)
    return min(1.0, math.exp(_log_delta_at(a, rho, eps)) * (1 + 1e-9))


def zcdp_rho(epsilon: float, delta: float) -> float:
    """Largest rho (to 1e-12 relative, rounded down) whose zCDP guarantee gives (epsilon, delta)-DP by
    :func:`zcdp_delta`."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    lo, hi = 0.0, epsilon  # rho = eps already fails: delta(eps, eps) >= ... checked below
    while zcdp_delta(hi, epsilon) <= delta:
        lo, hi = hi, 2 * hi
    if lo == 0.0:
        lo = hi
        while zcdp_delta(lo, epsilon) > delta:
            lo /= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if zcdp_delta(mid, epsilon) <= delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return lo


def zcdp_epsilon(rho: float, delta: float) -> float:
    """Smallest epsilon (to 1e-10 relative, rounded up) with rho-zCDP => (epsilon, delta)-DP."""
    if rho == 0:
        return 0.0
    lo, hi = 0.0, rho + 2 * math.sqrt(rho * math.log(1 / delta)) + 1e-12
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if zcdp_delta(rho, mid) <= delta:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-10 * hi:
            break
    return hi


# ------------------------------------------------------------------------------------------------------------
# the noise key
# ------------------------------------------------------------------------------------------------------------


def load_or_create_key(path: str | Path) -> bytes:
    """The secret noise key at ``path``: created (mode 0600, :data:`NOISE_KEY_BYTES` bytes from the OS
    CSPRNG) if absent, else read back.

    Raises:
        ValueError: naming the file: unreadable, not a regular file, readable by group or others, or not
        exactly :data:`NOISE_KEY_BYTES` bytes.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ValueError(f"{p}: cannot create the noise key file: {exc.strerror or exc}") from None
    else:
        try:
            os.write(fd, secrets.token_bytes(NOISE_KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{p}: the noise key file is not a regular file")
        if st.st_mode & 0o077:
            raise ValueError(f"{p}: the noise key file is readable by group or others (chmod 600 it)")
        key = p.read_bytes()
    except OSError as exc:
        raise ValueError(f"{p}: cannot read the noise key file: {exc.strerror or exc}") from None
    if len(key) != NOISE_KEY_BYTES:
        raise ValueError(f"{p}: a noise key file holds exactly {NOISE_KEY_BYTES} bytes, this one {len(key)}")
    return key
