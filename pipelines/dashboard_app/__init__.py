"""The live dashboard over the latest-state store (``python -m pipelines.dashboard``).

* :mod:`pipelines.dashboard_app.shape`: pure functions that turn store rows into what the page draws (the
  current window, its top-k with 95% whiskers and noise flags, series with CI bands, pane latency, counts);
* :mod:`pipelines.dashboard_app.reader`: the read queries against the store's tables (SQLite or PostgreSQL);
* :mod:`pipelines.dashboard_app.app`: the Bokeh document (one per browser session) and its periodic poll.
"""
