"""geofact: reference implementation of "Geometric Factual Recall in Transformers"."""

__version__ = "0.1.0"
