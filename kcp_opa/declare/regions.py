"""The country-to-region table data_residency is read against, and what a residency admits.

A unit declaring ``data_residency: [EU]`` means its data stays in the EU's member states; an
action names the place its data goes by ISO 3166-1 alpha-2 country (``target.country``: ``DE``),
so the policy needs to know which countries a region holds. This module is that knowledge, as
data: one table, shipped in every bundle (``kcp_data/deployment/regions``), and compiled per unit
profile into the codes its residency admits (``compliance.residency_places``), so that the Rego
rule is one lookup per decision, never a scan of the table.

Only regions that name more than one country, or whose name is not the country's code, are
listed: ``US``, ``SG``, ``CH``, ``NO`` and ``AU`` are country codes already and admit themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: The 27 member states of the European Union (ISO 3166-1 alpha-2; Greece is ``GR``, not ``EL``).
EU_MEMBER_STATES = (
    "AT", "BE", "BG", "CY", "CZ", "DE", "DK", "EE", "ES", "FI", "FR", "GR", "HR", "HU",
    "IE", "IT", "LT", "LU", "LV", "MT", "NL", "PL", "PT", "RO", "SE", "SI", "SK",
)  # fmt: skip

#: Region code -> the ISO 3166-1 alpha-2 countries it holds. The EEA is the EU and Iceland,
#: Liechtenstein and Norway; ``UK`` (the code manifests use) is the country ``GB``.
REGION_COUNTRIES: Mapping[str, tuple[str, ...]] = {
    "EU": EU_MEMBER_STATES,
    "EEA": tuple(sorted((*EU_MEMBER_STATES, "IS", "LI", "NO"))),
    "UK": ("GB",),
}


def regions_within(region: str) -> tuple[str, ...]:
    """The table's regions whose countries all lie in ``region`` (the EU within the EEA)."""
    holds = set(REGION_COUNTRIES.get(region, ()))
    return tuple(
        sorted(other for other, countries in REGION_COUNTRIES.items() if other != region and holds >= set(countries))
    )


def residency_places(regions: Iterable[str]) -> dict[str, bool]:
    """Every code a residency admits as a place: each listed code, the countries the table places
    in a listed region, and the table's regions lying inside one (``[EEA]`` admits ``EU``).

    An object, not a list: the policy asks ``places[code]``, a key lookup, for each decision.
    """
    admitted: set[str] = set()
    for region in regions:
        admitted.add(region)
        admitted.update(REGION_COUNTRIES.get(region, ()))
        admitted.update(regions_within(region))
    return dict.fromkeys(sorted(admitted), True)


def a_country_in(region: str) -> str:
    """A country the table places in ``region`` (its first), or the code itself when the table
    has no entry for it (a country code, ``global``, an unknown region)."""
    countries = REGION_COUNTRIES.get(region)
    return countries[0] if countries else region


def table() -> dict[str, list[str]]:
    """The table as bundle data: region -> sorted countries."""
    return {region: sorted(countries) for region, countries in sorted(REGION_COUNTRIES.items())}
