"""Training the single-hop models of Section 5 (Appendix B): config, stacked model, trainer, sweeps."""
