"""Parameters of a sparse-vector round: neighbouring relation L, bins b, clip eta, sensitivity Delta,
noise, discretisation. Shared by clients and the aggregator (they travel in the task).

Neighbouring relations (Zhou et al., S&P 2022, Sec. 3; ``L`` bounds ``||v - v'||_1``):

* ``"event"``: one coordinate of one user changes: ``L = 2`` for real values in [-1, 1], ``1`` binary.
* ``"user"``: everything of one user changes: ``L = 2k`` for real *and* binary values (two disjoint
  supports of k ones differ in 2k coordinates; the paper's "k-neighbouring" for binary is wrong under
  its own definition, see the spec, A1).
* an integer ``L``: ``||v - v'||_1 <= L``; capped at ``2k`` (no two valid inputs differ by more).

Truncation (a client with more than k non-zeros keeps a uniform random k-subset, ``k < d``) is part of
the mechanism, so the noise is calibrated to the L1 bound of two neighbours' *cleaned* vectors,
:func:`cleaned_L` (``SparseParams.L``):

* event level: adding item ``x`` to a client holding ``m >= k`` items. Couple the two truncations: the
  larger client drops ``x`` (then both keep the same k-subset) or keeps ``x`` and a uniform (k-1)-subset
  ``R`` of the rest, coupled with ``R + {y}`` for a uniform ``y`` outside ``R``. The cleaned vectors differ
  by ``+v_x`` at ``x`` and ``-v_y`` at ``y``: L1 ``<= 2`` for real values (the event ``L`` already) and
  ``2`` for binary values (twice the untruncated ``L = 1``), touching at most two bins.
* user level: any two cleaned vectors have at most k non-zeros each: ``2k``.
* an integer ``L`` with binary values: ``j <= L`` added ones evict at most ``j`` items: ``min(2L, 2k)``.
  With real values many tiny additions can evict many items, so an integer ``L`` bounds the cleaned
  vectors (the relation is stated on vectors with at most k non-zeros); ``"event"`` and ``"user"`` have
  no such caveat.

Per-bin Duchi noise with the full epsilon is allowed only when its worst-case privacy loss over the
changes the relation allows is at most epsilon (:func:`duchi_loss`): a change of ``D`` in ``C_j / eta``
costs at most ``f(D) = ln(1 + D (e^eps - 1) / 2)`` (the output probability ``1/2 + t (e^eps-1)/(2(e^eps+1))``
is linear in ``t``, its ratio largest at ``t = -1``), ``f`` is concave, so a total change ``L / eta`` over
at most ``m`` bins costs at most ``m f(min(L / (m eta), 2))``, with ``m = min(b, items a change touches)``.

Sensitivity of the bin vector ``C`` (Delta = the minimum of the rules that apply):

* ``L``: ``|sum s(x)(v_x - v'_x)| <= sum |v_x - v'_x|`` for every hash: pure eps, any hash family.
* clipping the bins to ``[-eta, eta]``: each of the ``b`` bins moves at most ``2 eta``: ``2 b eta``.
* (eps, delta): ``3 sqrt(b L ln(2b/delta))`` when ``L / b >= ln(2b/delta)`` (Lemma 14); holds with
  probability ``1 - delta`` over the hash choice, so it requires the keyed-PRF family ``"blake2b"``.

Parameter rules:

* ``"paper"`` (default): what the paper's experiments ran (``SVME::estimate_range`` of the released
  code; epsilon never enters b): ``L < sqrt(k)``: ``b = min(floor(k / L^2), k)``, no clipping,
  ``Delta = L``; otherwise ``b = 1``, ``eta = sqrt(k ln n) / 2.5`` (biased on purpose: a smaller clip
  gives a better constant), ``Delta = min(2 eta, L)``. Noise is Duchi's one-bit mechanism on
  ``C / eta`` when ``Delta / eps >= eta``, else Laplace(``Delta / eps``).
* ``"theory"``: the three regimes of the analysis, each with its balancing b, and the one with the
  smallest per-client second moment wins: A (``Delta = L``, ``b = k eps^2 / L^2``), B (the (eps,
  delta) rule, ``b = eps sqrt(k / (18 L ln(2b/delta)))``, only when ``delta > 0`` and its condition
  holds) and C (``b = 1``, ``eta = sqrt(2 k ln(2n/beta))`` so that no bin of any client is clipped
  with probability ``1 - beta``: unbiased).

Deviation from the paper's code: per-bin Duchi noise with the full epsilon is only private when
:func:`duchi_loss` is at most epsilon; where the code would use it otherwise (``b > 1`` beyond event
level) we use Laplace instead.

Discretisation (post-processing of the noisy bins, so privacy-free): Laplace bins are truncated to
``[-R, R]``, ``R = eta_eff + (Delta/eps) ln(2 n b / beta_trunc)`` (``beta_trunc = 1e-6``: the chance
that any bin of any of the ``n`` clients is truncated), then stochastically rounded to the grid
``g`` (unbiased, adds variance about ``g^2 / 6`` per bin); the code is an integer of
``w = ceil(log2(2R/g + 1))`` bits. Binary values with integer bins use discrete Laplace (two-sided
geometric with parameter ``exp(-eps/Delta)``), no rounding. Duchi bins are one bit.
"""

from __future__ import annotations

import dataclasses
import math

from ldp.sparse.hashes import DEFAULT_SPARSE_HASH, SPARSE_HASHES, check_family

__all__ = [
    "SparseParams",
    "choose_params",
    "neighbour_L",
    "cleaned_L",
    "items_changed",
    "duchi_loss",
    "clip_shrinkage",
    "RULES",
    "NOISES",
    "VALUE_KINDS",
    "SEED_BITS",
    "duchi_c",
]

RULES = ("paper", "theory")
NOISES = ("laplace", "discrete-laplace", "duchi")
VALUE_KINDS = ("real", "binary")
SEED_BITS = 64
DEFAULT_GRID = 0.25
TRUNC_BETA = 1e-6
DEFAULT_EXPECTED_USERS = 100_000
THEORY_BETA = 0.05


def duchi_c(epsilon: float) -> float:
    """``c_eps = (e^eps + 1) / (e^eps - 1)``: Duchi's one-bit output magnitude for inputs in [-1, 1]."""
    e = math.exp(epsilon)
    return (e + 1.0) / (e - 1.0)


def _check_eps(epsilon: float) -> float:
    eps = float(epsilon)
    if not math.isfinite(eps) or eps <= 0 or eps > 50:
        raise ValueError(f"epsilon must be a positive number <= 50, got {epsilon!r}")
    return eps


def neighbour_L(privacy: str | int, k: int, values: str = "real") -> int:
    """The L1 bound ``L`` of a neighbouring relation (see the module docstring)."""
    if values not in VALUE_KINDS:
        raise ValueError(f"values must be one of {VALUE_KINDS}, got {values!r}")
    if privacy == "event":
        return 2 if values == "real" else 1
    if privacy == "user":
        return 2 * k
    if isinstance(privacy, bool):
        raise ValueError("privacy must be 'event', 'user' or a positive integer L")
    try:
        L = int(privacy)
    except (TypeError, ValueError):
        msg = f"privacy must be 'event', 'user' or a positive integer L, got {privacy!r}"
        raise ValueError(msg) from None
    if L != privacy if not isinstance(privacy, str) else str(L) != privacy.strip():
        raise ValueError(f"privacy L must be an integer, got {privacy!r}")
    if L < 1:
        raise ValueError(f"privacy L must be >= 1, got {L}")
    return min(L, 2 * k)


def cleaned_L(privacy: str | int, k: int, values: str = "real", domain_size: int | None = None) -> int:
    """The L1 bound of two neighbours' vectors after input cleaning (truncation to k; module docstring).

    ``domain_size``: truncation cannot bind when ``k >= d`` (``None``: it can)."""
    L = neighbour_L(privacy, k, values)
    if domain_size is not None and k >= domain_size:
        return L
    if privacy == "event":
        return 2
    if values == "binary":
        return min(2 * L, 2 * k)
    return L


def items_changed(privacy: str | int, k: int, values: str = "real", domain_size: int | None = None) -> int:
    """The most non-zero entries two neighbours' cleaned vectors can differ in (``2k`` beyond event level
    and binary integer L)."""
    trunc = domain_size is None or k < domain_size
    if privacy == "event":
        return 2 if trunc else 1
    if values == "binary" and privacy != "user":
        L = neighbour_L(privacy, k, values)
        return min(2 * k, 2 * L if trunc else L)
    return 2 * k


def duchi_loss(epsilon: float, eta: float, bins: int, L: float, items: int) -> float:
    """Worst-case privacy loss of per-bin Duchi noise with the full ``epsilon`` on bins clipped to
    ``[-eta, eta]``, for changes of total L1 ``L`` spread over at most ``items`` entries (module
    docstring): ``m f(min(L / (m eta), 2))``, ``m = min(bins, items)``."""
    m = max(1, min(int(bins), int(items)))
    x = min(L / (m * eta), 2.0)
    return m * math.log1p(x * math.expm1(epsilon) / 2.0)


def clip_shrinkage(k: int, bins: int, eta: float | None) -> float:
    """``q``: a bound on the fraction by which clipping the bins shrinks each client's contribution to a
    coordinate's estimate (0 when clipping cannot bind).

    For a client holding ``x`` with value ``v`` (``|v| <= 1``) the bin of ``x`` is ``s(x) v + R``; with
    ``W = s(x) R`` symmetric (a sign independent of the others), ``E[s(x) clip(C)] - v`` has the sign of
    ``-v`` and magnitude at most ``|v| P(|W| >= eta - |v|)``; by Chebyshev with pairwise-independent signs
    and bins (``E W^2 = sum_{y != x} v_y^2 P[h(y) = h(x)] <= (k - 1) / b``) that is at most
    ``|v| q``, ``q = min(1, (k - 1) / (b (eta - 1)^2))``. Clients without ``x`` contribute no bias.
    """
    if eta is None or eta >= k:
        return 0.0
    if eta <= 1.0:
        return 1.0
    return float(min(1.0, (k - 1) / (bins * (eta - 1.0) ** 2)))


@dataclasses.dataclass(frozen=True)
class SparseParams:
    """Everything a client and the aggregator of one sparse-vector round must agree on.

    Attributes:
        epsilon, delta: the privacy budget (``delta = 0``: pure epsilon-LDP).
        domain_size: the item universe ``d`` (ids in ``[0, d)``, ``d <= 2**63``).
        sparsity: ``k``, the most non-zeros a client sends (more are truncated by random sampling).
        privacy: ``"event"``, ``"user"`` or the integer L as given.
        values: ``"real"`` (in [-1, 1]) or ``"binary"`` ({0, 1}).
        L: the L1 bound of two neighbours' cleaned (truncated) vectors (:func:`cleaned_L`).
        bins: ``b``.
        eta: the clip threshold of the bin sums; ``None`` = no clipping.
        Delta: the L1 sensitivity the noise is calibrated to.
        sensitivity_rule: which rule gave Delta: ``"L"``, ``"clip"`` or ``"delta"``.
        noise: ``"laplace"``, ``"discrete-laplace"`` or ``"duchi"``.
        grid: discretisation step of a Laplace bin (1 for discrete Laplace; Duchi codes are +-1).
        trunc: ``R``, the bound noisy Laplace bins are truncated to (``None`` for Duchi).
        hash_family: one of :data:`ldp.sparse.hashes.SPARSE_HASHES`.
        rule: the parameter rule that chose b and eta (``"paper"``, ``"theory"`` or ``"manual"``).
        expected_users: the ``n`` the rule used (``ln n`` in eta, ``n b`` in the truncation bound).
        notes: why the rule chose what it chose (human-readable).
    """

    epsilon: float
    domain_size: int
    sparsity: int
    privacy: str | int
    values: str
    L: int
    bins: int
    eta: float | None
    Delta: float
    sensitivity_rule: str
    noise: str
    grid: float
    trunc: float | None
    hash_family: str = DEFAULT_SPARSE_HASH
    delta: float = 0.0
    rule: str = "paper"
    expected_users: int = DEFAULT_EXPECTED_USERS
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_eps(self.epsilon)
        if self.values not in VALUE_KINDS:
            raise ValueError(f"values must be one of {VALUE_KINDS}, got {self.values!r}")
        if self.noise not in NOISES:
            raise ValueError(f"noise must be one of {NOISES}, got {self.noise!r}")
        if self.hash_family not in SPARSE_HASHES:
            raise ValueError(f"hash_family must be one of {SPARSE_HASHES}, got {self.hash_family!r}")
        check_family(self.hash_family, self.bins, self.domain_size)
        if self.sparsity < 1:
            raise ValueError(f"sparsity k must be >= 1, got {self.sparsity}")
        if self.noise == "duchi" and self.eta is None:
            raise ValueError("Duchi noise needs a clip threshold eta")
        if self.noise == "duchi" and self.bins > 1:
            items = items_changed(self.privacy, self.sparsity, self.values, self.domain_size)
            loss = duchi_loss(self.epsilon, self.eta, self.bins, self.L, items)
            if loss > self.epsilon * (1 + 1e-9):
                raise ValueError(
                    f"per-bin Duchi noise with the full epsilon is not L-private here: one change can "
                    f"touch {min(self.bins, items)} bins, worst-case loss {loss:.4g} > eps = "
                    f"{self.epsilon:g} (ldp.sparse.params.duchi_loss); use Laplace"
                )
        if self.noise == "discrete-laplace" and (
            self.values != "binary" or (self.eta is not None and self.eta != int(self.eta))
        ):
            raise ValueError("discrete Laplace needs integer bins: binary values and an integer eta")
        if self.sensitivity_rule == "delta" and self.hash_family != "blake2b":
            raise ValueError("the (eps, delta) sensitivity rule needs the keyed PRF hash family 'blake2b'")
        # the sensitivity actually granted by the rules must cover Delta
        valid = [float(self.L)]
        if self.eta is not None:
            valid.append(2.0 * self.bins * self.eta)
        if self.delta > 0 and self.L / self.bins >= math.log(2 * self.bins / self.delta):
            valid.append(3.0 * math.sqrt(self.bins * self.L * math.log(2 * self.bins / self.delta)))
        if self.noise != "duchi" and self.Delta + 1e-12 < min(valid):
            raise ValueError(f"Delta = {self.Delta} is below every valid sensitivity bound ({min(valid)})")

    # -- derived quantities ------------------------------------------------------------------------
    @property
    def eta_eff(self) -> float:
        """Largest possible |bin| after clipping: ``min(eta, k)``."""
        return float(self.sparsity) if self.eta is None else min(self.eta, float(self.sparsity))

    @property
    def clips(self) -> bool:
        """Whether clipping can bind (``eta < k``)."""
        return self.eta is not None and self.eta < self.sparsity

    @property
    def shrinkage(self) -> float:
        """:func:`clip_shrinkage` of this round (0 without a binding clip)."""
        return clip_shrinkage(self.sparsity, self.bins, self.eta) if self.clips else 0.0

    @property
    def scale(self) -> float:
        """Laplace scale ``Delta / eps``."""
        return self.Delta / self.epsilon

    @property
    def code_scale(self) -> float:
        """Value of one code unit: ``grid`` (Laplace), 1 (discrete), ``eta c_eps`` (Duchi)."""
        if self.noise == "duchi":
            return float(self.eta) * duchi_c(self.epsilon)
        return self.grid

    @property
    def max_code(self) -> int:
        """Largest |code| a valid report may carry."""
        if self.noise == "duchi":
            return 1
        return int(math.floor(self.trunc / self.grid))

    @property
    def bits_per_bin(self) -> int:
        """``w``: bits per discretised bin."""
        if self.noise == "duchi":
            return 1
        return max(1, math.ceil(math.log2(2 * self.max_code + 1)))

    @property
    def report_bits(self) -> int:
        """Bits of one report: a 64-bit seed plus ``b`` codes."""
        return SEED_BITS + self.bins * self.bits_per_bin

    @property
    def report_bytes(self) -> int:
        """``ceil(report_bits / 8)``."""
        return -(-self.report_bits // 8)

    def bin_noise_variance(self) -> float:
        """Variance a bin's noise and discretisation add (per bin, per client, in value units).

        Laplace: ``2 (Delta/eps)^2`` plus ``g^2 / 6`` for stochastic rounding (exact when the noise scale
        is large against ``g``, as it is here). Discrete Laplace: ``2 p / (1 - p)^2``,
        ``p = exp(-eps/Delta)``. Duchi: not additive (see :meth:`duchi_second_moment`).
        """
        if self.noise == "laplace":
            return 2.0 * self.scale**2 + self.grid**2 / 6.0
        if self.noise == "discrete-laplace":
            p = math.exp(-self.epsilon / self.Delta)
            return 2.0 * p / (1.0 - p) ** 2
        raise ValueError("Duchi noise is not additive; use duchi_second_moment()")

    def duchi_second_moment(self) -> float:
        """``(eta c_eps)^2``: the second moment of one Duchi bin."""
        return self.code_scale**2

    def client_second_moment(self, norm2: float | None = None) -> float:
        """Per-client variance of a never-owned coordinate: ``norm2 / b + noise`` (``norm2``: default k)."""
        if self.noise == "duchi":
            return self.duchi_second_moment()
        nv = float(self.sparsity) if norm2 is None else float(norm2)
        return nv / self.bins + self.bin_noise_variance()

    def describe(self) -> dict:
        """JSON-ready description (what a task stores)."""
        out = dataclasses.asdict(self)
        out["notes"] = list(self.notes)
        out["bits_per_bin"] = self.bits_per_bin
        out["report_bits"] = self.report_bits
        out["hash_version"] = f"{self.hash_family}/v1"
        return out


def _laplace_trunc(eta_eff: float, scale: float, n: int, b: int) -> float:
    return eta_eff + scale * math.log(2.0 * n * b / TRUNC_BETA)


# (b, eta, Delta, sensitivity rule, noise): the choice :func:`choose_params` builds up step by step.
_Choice = tuple[int, float | None, float, str, str]


@dataclasses.dataclass
class _RuleContext:
    """The fixed inputs of one :func:`choose_params` call and the notes it collects."""

    eps: float
    k: int
    L: int
    changed: int
    delta: float
    n: int
    fam: str
    notes: list[str]

    def duchi_ok(self, b_: int, e_: float) -> bool:
        """Whether per-bin Duchi with ``b_`` bins and clip ``e_`` stays eps-private."""
        return duchi_loss(self.eps, e_, b_, self.L, self.changed) <= self.eps * (1 + 1e-9)

    def fit_bins(self, x: int) -> int:
        """``x`` clamped to ``[1, k]``, rounded down to a power of two under gf2-affine (with a note)."""
        x = max(1, min(int(x), self.k))
        if self.fam == "gf2-affine" and x & (x - 1):
            self.notes.append(f"b = {x} rounded down to {_pow2_floor(x)} (gf2-affine needs a power of two)")
            x = _pow2_floor(x)
        return x

    def delta_ok(self, b_: int) -> bool:
        """Whether the (eps, delta) sensitivity rule's condition holds for ``b_`` bins."""
        return self.delta > 0 and self.L / b_ >= math.log(2 * b_ / self.delta)

    def delta_rule(self, b_: float) -> float:
        """The (eps, delta) sensitivity ``3 sqrt(b L ln(2b/delta))``."""
        return 3.0 * math.sqrt(b_ * self.L * math.log(2 * b_ / self.delta))


def _pow2_floor(x: int) -> int:
    """The largest power of two ``<= max(1, x)``."""
    return 1 << (max(1, int(x)).bit_length() - 1)


def _check_choose_args(
    epsilon: float, domain_size: int, sparsity: int, rule: str, delta: float, expected_users: int, grid: float
) -> tuple[float, int, int, int]:
    """Validates :func:`choose_params`' scalar arguments; returns ``(eps, d, k, n)``."""
    eps = _check_eps(epsilon)
    d, k = int(domain_size), int(sparsity)
    if k < 1:
        raise ValueError(f"sparsity k must be >= 1, got {sparsity}")
    if d < 1 or d > 1 << 63:
        raise ValueError(f"domain_size must lie in [1, 2**63], got {domain_size}")
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if not 0 <= float(delta) < 1:
        raise ValueError(f"delta must lie in [0, 1), got {delta}")
    n = int(expected_users)
    if n < 2:
        raise ValueError(f"expected_users must be >= 2, got {expected_users}")
    if not (grid > 0 and math.isfinite(grid)):
        raise ValueError(f"grid must be a positive number, got {grid}")
    return eps, d, k, n


def _paper_choice(ctx: _RuleContext) -> _Choice:
    """The paper rule: bins and clipping by ``L`` against ``sqrt(k)``, then Duchi where it is private."""
    k, L, eps, notes = ctx.k, ctx.L, ctx.eps, ctx.notes
    if L < math.sqrt(k):
        b, eta_, Delta, srule = ctx.fit_bins(k // (L * L)), None, float(L), "L"
        notes.append("paper rule: L < sqrt(k): b = min(floor(k/L^2), k), no clipping, Delta = L")
    else:
        b = 1
        eta_ = math.sqrt(k * math.log(ctx.n)) / 2.5
        Delta, srule = (2 * eta_, "clip") if 2 * eta_ < L else (float(L), "L")
        notes.append("paper rule: L >= sqrt(k): b = 1, eta = sqrt(k ln n)/2.5, Delta = min(2 eta, L)")
    if ctx.delta_ok(b) and ctx.delta_rule(b) < Delta:
        Delta, srule = ctx.delta_rule(b), "delta"
        notes.append("(eps, delta) rule 3 sqrt(b L ln(2b/delta)) is smaller and its condition holds")
    eta_duchi = eta_ if eta_ is not None else float(k)
    if Delta / eps >= eta_duchi and ctx.duchi_ok(b, eta_duchi):
        chosen_noise = "duchi"
        eta_ = eta_duchi
    else:
        if Delta / eps >= eta_duchi:
            notes.append("paper code: per-bin Duchi here, not L-private with this b; Laplace used")
        chosen_noise = "laplace"
    return b, eta_, Delta, srule, chosen_noise


def _theory_choice(ctx: _RuleContext) -> _Choice:
    """The theory rule: regimes A (no clip), B ((eps, delta)) and C (b = 1, clipped), each with Laplace or
    Duchi; the smallest per-client second moment wins."""
    k, L, eps, delta = ctx.k, ctx.L, ctx.eps, ctx.delta
    cands = []
    bA = ctx.fit_bins(round(k * eps * eps / (L * L)))
    cands.append(("A", bA, None, float(L), "L"))
    if delta > 0:
        bB = 1.0
        for _ in range(50):
            bB = eps * math.sqrt(k / (18.0 * L * math.log(2 * max(bB, 1.0) / delta)))
        bB = ctx.fit_bins(math.floor(max(bB, 1.0)))
        if ctx.delta_ok(bB):
            dB = ctx.delta_rule(bB)
            cands.append(("B", bB, None, min(float(L), dB), "delta" if dB < L else "L"))
    etaC = math.sqrt(2.0 * k * math.log(2.0 * ctx.n / THEORY_BETA))
    if etaC < k:
        cands.append(("C", 1, etaC, min(float(L), 2 * etaC), "clip" if 2 * etaC < L else "L"))
    best = None
    for name, b_, e_, D_, r_ in cands:
        lap = min(k, e_ or k) / b_ + 2 * (D_ / eps) ** 2
        options = [(lap, "laplace")]
        if ctx.duchi_ok(b_, e_ or k):
            options.append(((e_ or k) ** 2 * duchi_c(eps) ** 2, "duchi"))
        for m2, nz in options:
            if best is None or m2 < best[0]:
                best = (m2, name, b_, e_, D_, r_, nz)
    _, name, b, eta_, Delta, srule, chosen_noise = best
    if chosen_noise == "duchi" and eta_ is None:
        eta_ = float(k)
    ctx.notes.append(f"theory rule: regime {name} has the smallest per-client second moment")
    return b, eta_, Delta, srule, chosen_noise


def _apply_overrides(
    ctx: _RuleContext, choice: _Choice, bins: int | None, eta: float | None, noise: str | None, values: str
) -> _Choice:
    """The rule's choice with the manual ``bins`` / ``eta`` / ``noise`` overrides applied; the sensitivity
    is the smallest valid one and the noise falls back to Laplace where Duchi is no longer private."""
    b, eta_, Delta, srule, chosen_noise = choice
    if bins is not None:
        b = int(bins)
    if eta is not None:
        eta_ = float(eta)
    valid = [(float(ctx.L), "L")]
    if eta_ is not None and eta_ < ctx.k:
        valid.append((2.0 * b * eta_, "clip"))
    if ctx.delta_ok(b):
        valid.append((ctx.delta_rule(b), "delta"))
    Delta, srule = min(valid)
    if noise is not None:
        chosen_noise = noise
    elif chosen_noise == "duchi" and (eta_ is None or not ctx.duchi_ok(b, eta_)):
        chosen_noise = "laplace"
    elif chosen_noise != "duchi" and values == "binary":
        chosen_noise = "laplace"  # re-decided below (discrete Laplace when bins stay integers)
    return b, eta_, Delta, srule, chosen_noise


def _finish_choice(ctx: _RuleContext, choice: _Choice, values: str, hash_family: str | None) -> _Choice:
    """Drops a clip that cannot bind, switches binary values to discrete Laplace on integer bins, and
    requires (and sets ``ctx.fam`` to) blake2b under the (eps, delta) sensitivity rule."""
    b, eta_, Delta, srule, chosen_noise = choice
    if eta_ is not None and eta_ >= ctx.k and chosen_noise != "duchi":
        eta_ = None  # cannot bind
    if values == "binary" and chosen_noise == "laplace" and (eta_ is None or eta_ >= 1):
        if eta_ is not None:
            eta_ = float(math.floor(eta_))
            if srule == "clip":
                Delta = min(float(ctx.L), 2.0 * b * eta_)
        chosen_noise = "discrete-laplace"
        ctx.notes.append("binary values: integer bins, discrete Laplace")
    if srule == "delta":
        if hash_family not in (None, "blake2b"):
            raise ValueError("the (eps, delta) sensitivity rule needs hash_family='blake2b' (a keyed PRF)")
        ctx.fam = "blake2b"
    return b, eta_, Delta, srule, chosen_noise


def _grid_trunc(ctx: _RuleContext, choice: _Choice, grid: float) -> tuple[float, float | None]:
    """The discretisation step and truncation bound ``(grid, R)`` of the chosen noise."""
    b, eta_, Delta, _, chosen_noise = choice
    k, n, eps = ctx.k, ctx.n, ctx.eps
    if chosen_noise == "duchi":
        g, R = 1.0, None
    elif chosen_noise == "discrete-laplace":
        p = math.exp(-eps / Delta)
        g = 1.0
        R = float(
            math.ceil((eta_ if eta_ is not None else k) + math.log(2.0 * n * b / TRUNC_BETA) / -math.log(p))
        )
    else:
        g = float(grid)
        R = _laplace_trunc(min(eta_ if eta_ is not None else k, k), Delta / eps, n, b)
    return g, R


def choose_params(
    epsilon: float,
    domain_size: int,
    sparsity: int,
    privacy: str | int = "user",
    *,
    values: str = "real",
    delta: float = 0.0,
    rule: str = "paper",
    expected_users: int = DEFAULT_EXPECTED_USERS,
    hash_family: str | None = None,
    grid: float = DEFAULT_GRID,
    bins: int | None = None,
    eta: float | None = None,
    noise: str | None = None,
) -> SparseParams:
    """Chooses b, eta, Delta and the noise for a round (see the module docstring).

    Args:
        epsilon: privacy budget per report.
        domain_size: ``d``.
        sparsity: ``k``.
        privacy: ``"event"``, ``"user"`` or an integer L.
        values: ``"real"`` or ``"binary"``.
        delta: ``0`` for pure eps-LDP; ``> 0`` allows the (eps, delta) sensitivity rule where it applies.
        rule: ``"paper"`` or ``"theory"``.
        expected_users: ``n`` (the paper rule's clip ``sqrt(k ln n) / 2.5``; the truncation bound).
        hash_family: default ``"gf2-affine"`` (``"blake2b"`` when the (eps, delta) rule is used).
        grid: Laplace discretisation step.
        bins, eta, noise: override the rule's choice (``rule`` becomes ``"manual"``; every
            override is still checked for privacy).
    """
    eps, d, k, n = _check_choose_args(epsilon, domain_size, sparsity, rule, delta, expected_users, grid)
    ctx = _rule_context(eps, d, k, n, privacy, values, delta, hash_family)
    choice = _paper_choice(ctx) if rule == "paper" else _theory_choice(ctx)
    if bins is not None or eta is not None or noise is not None:
        rule = "manual"
        choice = _apply_overrides(ctx, choice, bins, eta, noise, values)
    choice = _finish_choice(ctx, choice, values, hash_family)
    b, eta_, Delta, srule, chosen_noise = choice
    g, R = _grid_trunc(ctx, choice, grid)
    return SparseParams(
        epsilon=eps, domain_size=d, sparsity=k, privacy=privacy, values=values, L=ctx.L, bins=b, eta=eta_,
        Delta=float(Delta), sensitivity_rule=srule, noise=chosen_noise, grid=g, trunc=R,
        hash_family=ctx.fam, delta=float(delta), rule=rule, expected_users=n, notes=tuple(ctx.notes),
    )  # fmt: skip


def _rule_context(
    eps: float, d: int, k: int, n: int, privacy: str | int, values: str, delta: float, hash_family: str | None
) -> _RuleContext:
    """The fixed inputs of the rules: the cleaned L (noted when truncation raises it above the neighbour
    relation's), the items one neighbour changes and the hash family."""
    L = cleaned_L(privacy, k, values, d)
    changed = items_changed(privacy, k, values, d)
    notes: list[str] = []
    if L > neighbour_L(privacy, k, values):
        notes.append(f"L = {L}: truncation to k can turn one added item into one added and one evicted")
    return _RuleContext(eps, k, L, changed, delta, n, hash_family or DEFAULT_SPARSE_HASH, notes)
