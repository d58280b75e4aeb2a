"""The eps-LDP audit of what every client sends, for every mechanism of every kind in the registries.

The cases come from ``ldp.kinds.KINDS``: each kind with ``ldp_reports`` and each mechanism its task section
lists (``kind.task.mechanisms()``: ``ldp.oracles.MECHANISMS`` and the memoized oracles, the range methods
with their per-group oracles, the sparse and numeric mechanisms). ``tests/audit/clients.py`` encodes the
worst input pairs of each kind with the task's own client encoder; ``tests/audit/cells.py`` sorts the reports
into value cells and float-bit cells of the fields that travel (``value``, ``seed``, ``bits``, ``items``,
``reals``, plus the group); a case fails when the Clopper-Pearson lower bound of the largest log ratio
(Bonferroni over every cell of the case, overall level 1e-6) exceeds the epsilon one report claims.

Size (power). ``N = 200,000`` reports per input. A leak of true ratio ``e^(eps + 0.3)`` in one cell is
caught with probability above 0.99 when that cell holds at least 0.6% (eps 2), 0.83% (eps 1) or 1.03%
(eps 0.5) of the reports of the input where it is rarer (``n p_b`` >= 1,216 / 1,669 / 2,060), with up
to 5,000 cells in the case (simulated from the Clopper-Pearson bounds at level 1e-6 / (4 K)). Quantile
cells hold 2% each, so a value leak of that size is always caught; the floating-point tells of the
numeric mechanisms (issue 27 finding 2) are far larger (bounds of 5.7 to 7.6 on today's encoders at every
epsilon). The whole module runs in about a minute and a half on one core.

A kind with LDP reports that has no adapter in ``clients.ADAPTERS``, or a mechanism that cannot be encoded
and audited, fails :func:`test_every_kind_and_mechanism_is_audited_or_declares_why` unless its registry
entry declares ``audit_exempt`` with a reason (``ldp.kinds.Kind.audit_exempt``).
"""

from __future__ import annotations

import json
import math
import types
import zlib

import numpy as np
import pytest

import ldp.kinds
from ldp.audit import float_bit_cells
from ldp.reports import Reports
from wire.json_form import report_from_json, reports_to_json

from .cells import audit
from .clients import ADAPTERS, Segment

pytestmark = [pytest.mark.integration, pytest.mark.statistical]

#: the epsilons of the standing audit
EPSILONS = (0.5, 1.0, 2.0)
#: reports per input (module docstring: the power calculation)
N = 200_000
#: overall level of one case (Bonferroni over its cells)
ALPHA = 1e-6
#: the alias every kind may list; audited through what it resolves to
AUTO = "auto"


def unaudited(kinds: dict, adapters: dict) -> list[str]:
    """Why each kind or mechanism escapes the audit without a declared reason (empty: none does)."""
    out: list[str] = []
    for name, kind in kinds.items():
        exempt = dict(getattr(kind, "audit_exempt", {}) or {})
        mechanisms = tuple(kind.task.mechanisms())
        for mech, why in exempt.items():
            if not isinstance(why, str) or not why.strip():
                out.append(f"kind {name!r}: audit_exempt[{mech!r}] gives no reason")
            elif mech != "*" and mech not in mechanisms:
                out.append(f"kind {name!r}: audit_exempt names {mech!r}, not one of its mechanisms")
        if not kind.ldp_reports or "*" in exempt:
            continue  # central DP: no randomized report leaves a device; or declared
        if name not in adapters:
            out.append(
                f"kind {name!r} sends LDP reports but tests/audit/clients.py has no adapter for it "
                "(write one, or declare audit_exempt={'*': 'reason'} on its registry entry)"
            )
    return out


def _rng(*key: object) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(repr(key).encode()), 27])


def _cases() -> list:
    out = []
    for kname, kind in ldp.kinds.KINDS.items():
        exempt = dict(kind.audit_exempt)
        if not kind.ldp_reports or "*" in exempt or kname not in ADAPTERS:
            continue
        for mech in kind.task.mechanisms():
            if mech == AUTO or mech in exempt:
                continue
            for eps in EPSILONS:
                out.append(pytest.param(kname, mech, eps, id=f"{kname}-{mech}-eps{eps:g}"))
    return out


def test_every_kind_and_mechanism_is_audited_or_declares_why():
    """Every registered kind with LDP reports has an adapter or a declared exemption, every exemption
    names a mechanism of its kind and a reason; every mechanism builds a task and a pair to audit."""
    assert unaudited(ldp.kinds.KINDS, ADAPTERS) == []
    for kname, kind in ldp.kinds.KINDS.items():
        if kname not in ADAPTERS or not kind.ldp_reports:
            continue
        adapter = ADAPTERS[kname]
        for mech in kind.task.mechanisms():
            if mech == AUTO or mech in kind.audit_exempt:
                continue
            tasks = adapter.tasks(kind.example, mech, 1.0)
            assert tasks, (kname, mech)
            for _, task in tasks:
                assert adapter.pairs(task), (kname, mech)


def test_an_undeclared_kind_or_a_bad_exemption_fails_the_inventory():
    """The inventory's own attack: a toy kind with reports and no adapter, an exemption without a reason
    and one naming no mechanism are each reported; a declared exemption and a central-DP kind are not."""

    def kind(name, mechanisms, exempt=None, ldp_reports=True):
        task = types.SimpleNamespace(mechanisms=lambda: tuple(mechanisms))
        return types.SimpleNamespace(name=name, task=task, audit_exempt=exempt or {}, ldp_reports=ldp_reports)

    toy = {"toy": kind("toy", ["coin"])}
    assert len(unaudited(toy, {})) == 1 and "no adapter" in unaudited(toy, {})[0]
    assert unaudited({"toy": kind("toy", ["coin"], {"*": "a test kind"})}, {}) == []
    assert unaudited({"central": kind("central", ["identity"], ldp_reports=False)}, {}) == []
    problems = unaudited({"toy": kind("toy", ["coin"], {"coin": " ", "gone": "removed"})}, {"toy": object()})
    assert len(problems) == 2, problems


@pytest.mark.parametrize("eps", EPSILONS)
def test_auto_resolves_to_an_audited_mechanism(eps):
    """``auto`` is not audited on its own: at every epsilon of the audit it resolves to a mechanism of its
    kind that is (not an exempt one)."""
    for kname, kind in ldp.kinds.KINDS.items():
        if AUTO not in kind.task.mechanisms() or kname not in ADAPTERS:
            continue
        adapter = ADAPTERS[kname]
        for _, task in adapter.tasks(kind.example, AUTO, eps):
            name = adapter.resolved_name(task)
            assert name in kind.task.mechanisms() and name != AUTO, (kname, eps, name)
            assert name not in kind.audit_exempt, (kname, eps, name)


def _segments_equal_wire(task_id: str, seg: Segment, group: int) -> None:
    """The audited fields are what travels: the reports through the JSON form (reports_to_json, text,
    report_from_json, the collector's mapping to the Avro record) come back bit for bit."""
    for reports in (seg.a, seg.b):
        sample = reports.take(slice(0, 64))
        if len(sample) == 0:
            continue
        text = json.dumps(reports_to_json(task_id, sample, 0, group))
        recs = [report_from_json(r) for r in json.loads(text)]
        assert [r.get("group", 0) for r in recs] == [group] * len(sample)
        if sample.values is not None:
            assert [r["value"] for r in recs] == np.asarray(sample.values, np.int64).tolist()
        if sample.seeds is not None:
            got = np.array([r["seed"] for r in recs], dtype=np.int64).view(np.uint64)
            assert np.array_equal(got, np.asarray(sample.seeds, np.uint64))
        if sample.bits is not None:
            assert [r["bits"] for r in recs] == [row.tobytes() for row in np.asarray(sample.bits, np.uint8)]
        if sample.items is not None:
            want = np.asarray(sample.items, np.int64).reshape(len(sample), -1).tolist()
            assert [r["items"] for r in recs] == want
        if sample.reals is not None:
            got = np.array([r["reals"] for r in recs], dtype=np.float64)
            want = np.asarray(sample.reals, np.float64).reshape(len(sample), -1)
            assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


@pytest.mark.parametrize(("kind_name", "mechanism"), sorted({(p.values[0], p.values[1]) for p in _cases()}))
def test_audited_fields_are_the_wire_form(kind_name, mechanism):
    kind = ldp.kinds.KINDS[kind_name]
    adapter = ADAPTERS[kind_name]
    for _, task in adapter.tasks(kind.example, mechanism, 1.0):
        pair = adapter.pairs(task)[0]
        segs = adapter.encode_pair(task, pair, 2_000, _rng("wire", kind_name, mechanism))
        for seg in segs:
            group = int(seg.label.split()[-1]) if seg.label.startswith("group ") else 0
            _segments_equal_wire(task.task_id, seg, group)


@pytest.mark.parametrize(("kind_name", "mechanism", "eps"), _cases())
def test_client_reports_are_epsilon_ldp(kind_name, mechanism, eps):
    """Value and bit cells of what the client sends, at the kind's worst input pairs: the Clopper-Pearson
    lower bound of the largest log ratio (level 1e-6, Bonferroni over the case's cells) stays at or below
    the epsilon one report claims."""
    kind = ldp.kinds.KINDS[kind_name]
    adapter = ADAPTERS[kind_name]
    failures = []
    for label, task in adapter.tasks(kind.example, mechanism, eps):
        claimed = adapter.claimed_epsilon(task)
        for pair in adapter.pairs(task):
            segs = adapter.encode_pair(task, pair, N, _rng(kind_name, mechanism, eps, label, pair.label))
            assert sum(len(s.a) for s in segs) == N and sum(len(s.b) for s in segs) == N
            res = audit(segs, N, N, alpha=ALPHA)
            if not res.bound <= claimed:
                failures.append(
                    f"{label or kind_name} {pair.label}: lower bound of the log ratio {res.bound:.3f} > "
                    f"eps {claimed:g} (view {res.worst_view!r}, {res.cells} cells)"
                )
    assert not failures, "; ".join(failures)


def _segment(a: np.ndarray, b: np.ndarray) -> list[Segment]:
    return [Segment("", Reports(reals=a), Reports(reals=b))]


def test_the_audit_catches_a_floating_point_tell():
    """Attack: two inputs whose outputs have the same distribution of values but differ in their last bit
    (``z - 1`` for ``z`` in [2, 3) against ``u`` on the 2^-52 grid): the value cells see nothing, the bit
    cells see an infinite ratio."""
    rng = _rng("tell")
    u = rng.random(N)
    a = (u + 2.0) - 1.0 - 1.0  # z - 1 with z in [2, 3): multiples of 2^-51 only
    b = u
    res = audit(_segment(a, b), N, N, alpha=ALPHA)
    assert res.bound > 2.0 and "bits" in res.worst_view, res
    assert set(np.unique(float_bit_cells(a) % 64)) != set(np.unique(float_bit_cells(b) % 64))


def test_the_audit_catches_a_ratio_just_above_epsilon():
    """Attack sized by the power calculation: randomized response whose true ratio is e^(eps + 0.3) at
    eps = 1 (a 2-valued output) is flagged; the honest e^eps one is not."""
    rng = _rng("rr")
    for excess, flagged in ((0.3, True), (0.0, False)):
        p = math.exp(1.0 + excess) / (1.0 + math.exp(1.0 + excess))
        a = (rng.random(N) < p).astype(np.float64)
        b = (rng.random(N) < 1.0 - p).astype(np.float64)
        assert (audit(_segment(a, b), N, N, alpha=ALPHA).bound > 1.0) is flagged, excess


def test_a_seeded_payload_without_a_decoder_is_refused():
    """A report carrying a seed cannot be audited from its value alone: the cells would be blind to what
    the seed means, so the audit refuses instead of passing it."""
    r = Reports(values=np.zeros(10, np.int64), seeds=np.arange(10, dtype=np.uint64))
    with pytest.raises(AssertionError, match="seeded payload without a decoder"):
        audit([Segment("", r, r)], 10, 10)
