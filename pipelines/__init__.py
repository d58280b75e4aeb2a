"""pipelines package."""
