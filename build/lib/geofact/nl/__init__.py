"""Natural-language facts (Section 5.3, Appendix E): the entity corpus, probes on real language
models, and a one-layer LM trained on the rendered corpus."""
