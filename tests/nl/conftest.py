import pytest

from geofact.nl.corpus import load_corpus, render_corpus
from geofact.nl.lm import tiny_llama


@pytest.fixture(scope="session")
def corpus():
    return load_corpus()


@pytest.fixture(scope="session")
def tiny_lm(corpus):
    """A random 2-layer Llama over the words of two categories (no download)."""
    words = {w for r in render_corpus(corpus, ["people", "films"]) for w in r.text.replace("'", " ' ").split()}
    return tiny_llama(sorted(words), n_layers=2, d_model=32)
