"""ldp: the numpy core of ldp-beam (LDP frequency oracles, range-query mechanisms, post-processing)."""

__version__ = "0.2.0"
