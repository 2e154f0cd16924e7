"""Retrieval quality on labelled BEIR data (`ragc eval`), the abstention variant, and the quality gate."""
