"""Flattening of the kinds' result rows into the rows the latest-state store keeps (:mod:`ldp.store.flatten`).

The store itself (SQL tables, backends, the write and read API) is the top-level package :mod:`store`,
which imports this; nothing here imports it.
"""
