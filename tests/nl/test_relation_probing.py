import json

import numpy as np
import pytest

from geofact.nl import relation_probing
from geofact.nl.cosine_probe import ProbeConfig
from geofact.nl.relation_probing import best_layer_summary, layer_table, probe_category

FAST = ProbeConfig(rank=8, max_epochs=3)


def test_records_cover_every_layer_and_are_cached(corpus, tiny_lm, tmp_path, monkeypatch):
    records = probe_category(tiny_lm, corpus, "people", tmp_path, relations=["gender", "country_of_birth"],
                             probe=FAST, max_entities=40)
    assert [r["config"]["relation"] for r in records] == ["gender", "country_of_birth"]
    for r in records:
        assert [row["layer"] for row in r["layers"]] == [0, 1, 2]
        assert r["n_train"] + r["n_val"] == 40 and not r["dropped"]
        assert r["config"]["category_digest"] == corpus.category("people").digest and r["model_info"]["n_layers"] == 2
        assert 0 <= r["layers"][0]["hits1"] <= r["layers"][0]["hits10"] <= 1
    # a second call reads the cache: nothing is fit again
    monkeypatch.setattr(relation_probing, "probe_and_score", lambda *a, **k: pytest.fail("recomputed a cached relation"))
    again = probe_category(tiny_lm, corpus, "people", tmp_path, relations=["gender", "country_of_birth"],
                           probe=FAST, max_entities=40)
    assert again == records


def test_also_modes_caches_the_other_aggregation_as_its_own_call_would(corpus, tiny_lm, tmp_path, monkeypatch):
    kw = dict(relations=["gender"], probe=FAST, max_entities=30)
    last = probe_category(tiny_lm, corpus, "people", tmp_path / "shared", also_modes=("mean",), **kw)
    alone = probe_category(tiny_lm, corpus, "people", tmp_path / "alone", mode="mean", **kw)
    monkeypatch.setattr(relation_probing, "probe_and_score", lambda *a, **k: pytest.fail("recomputed a cached relation"))
    mean = probe_category(tiny_lm, corpus, "people", tmp_path / "shared", mode="mean", **kw)
    assert [r["config"]["mode"] for r in last + mean] == ["last", "mean"]
    assert mean[0]["layers"] == alone[0]["layers"] and mean[0]["epochs"] == alone[0]["epochs"]


def test_an_interrupted_category_resumes_with_what_it_has(corpus, tiny_lm, tmp_path, monkeypatch):
    probe_category(tiny_lm, corpus, "films", tmp_path, relations=["genre"], probe=FAST, max_entities=30)
    fitted = []
    real_fit = relation_probing.probe_and_score
    monkeypatch.setattr(relation_probing, "probe_and_score", lambda *a, **k: fitted.append(1) or real_fit(*a, **k))
    records = probe_category(tiny_lm, corpus, "films", tmp_path, relations=["genre", "director"], probe=FAST,
                             max_entities=30)
    assert len(fitted) == 1 and len(records) == 2
    # another probe config is another result, never the cached one
    probe_category(tiny_lm, corpus, "films", tmp_path, relations=["genre"], probe=ProbeConfig(rank=4, max_epochs=2),
                   max_entities=30)
    assert len(fitted) == 2
    files = sorted((tmp_path / "tiny-llama-2x32").glob("films.genre.*.json"))
    assert len(files) == 2 and all(json.loads(f.read_text())["schema"] == relation_probing.SCHEMA for f in files)


def test_bad_arguments_are_named(corpus, tiny_lm, tmp_path):
    with pytest.raises(ValueError, match="relations must be among"):
        probe_category(tiny_lm, corpus, "people", tmp_path, relations=["height"])
    with pytest.raises(ValueError, match="max_entities must be >= 10"):
        probe_category(tiny_lm, corpus, "people", tmp_path, max_entities=3)


def test_best_layer_follows_the_relation_averaged_hits1():
    def record(h1, mrr):
        return {"layers": [{"layer": i, "hits1": a, "hits10": 1.0, "mrr": b} for i, (a, b) in enumerate(zip(h1, mrr))]}

    records = [record([0.1, 0.5, 0.3, 0.2], [0.2, 0.6, 0.4, 0.3]), record([0.1, 0.1, 0.5, 0.2], [0.2, 0.2, 0.7, 0.3])]
    np.testing.assert_allclose(layer_table(records)["hits1"], [0.1, 0.3, 0.4, 0.2])
    summary = best_layer_summary(records)
    assert summary["best_layer"] == 2 and summary["depth"] == 3
    assert summary["best_mrr"] == pytest.approx(0.55) and summary["layer0_mrr"] == pytest.approx(0.2)
    assert summary["best_fraction"] == pytest.approx(2 / 3)
