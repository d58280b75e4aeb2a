"""Repeated collection: per-user budgets, memoized reports and their accounting.

* :mod:`ldp.longitudinal.budget`: the budget policy a task declares and the client-side ledger.
* :mod:`ldp.longitudinal.memo`: memoized mechanisms (RAPPOR-style GRR and unary encoding, memo-OLH,
  LOLOHA): permanent responses from HMAC-SHA256 of a per-user secret, a fresh instantaneous
  randomization per report, and the server-side estimators (the ``FrequencyOracle`` protocol).
* :mod:`ldp.longitudinal.client`: the client object and its versioned state file.
* :mod:`ldp.longitudinal.accounting`: composition across windows with ``dp-accounting``.

Beam-free, like all of ``ldp``. See ``docs/longitudinal.md``.
"""
