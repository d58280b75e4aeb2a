"""ldp package."""
