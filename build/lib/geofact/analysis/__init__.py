"""Mechanism analyses of trained single-hop models (Section 5.1 Analysis, Appendix B.3 / D)."""
