"""Which prices a plan used: the scenario's hardware, priced by its cost model, stated in the
result (rate, provider, purchase model, date seen, source)."""

from __future__ import annotations

from pydantic import BaseModel

from planner.catalog.hardware import hardware
from planner.errors import InputError
from planner.perf.cost import PriceQuote
from planner.scenario import Scenario


def scenario_hardware(scn: Scenario) -> list[str]:
    """Every hardware profile a scenario names (``hardware`` fields of its design and search)."""
    names: list[str] = []

    def walk(obj: object) -> None:
        if isinstance(obj, BaseModel):
            for field in type(obj).model_fields:
                value = getattr(obj, field)
                if field == "hardware":
                    names.extend([value] if isinstance(value, str) else list(value or []))
                else:
                    walk(value)
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                walk(item)

    walk(scn.design)
    walk(scn.search)
    return list(dict.fromkeys(n for n in names if not n.endswith((".yaml", ".yml"))))


def prices_used(scn: Scenario) -> list[PriceQuote]:
    """A quote per priced hardware of the scenario (ownership: the amortised purchase, energy
    comes on top at each deployment's own power). Hardware without a price is left out: the
    design that needs it raises, or says what it could not compute."""
    quotes = []
    for name in scenario_hardware(scn):
        try:
            quotes.append(scn.cost.quote(hardware(name)))
        except InputError:
            continue
    return quotes


# Designs whose answer depends on prices (POLCA and slo-search rank by power and tokens/s per GPU)
PRICED_DESIGNS = ("colocated", "splitwise", "prfaas", "fleet")


def scenario_prices(scn: Scenario) -> list[PriceQuote]:
    """The quotes a plan of ``scn`` states: none for designs that do not use prices."""
    return prices_used(scn) if scn.design.type in PRICED_DESIGNS else []


def unstated(result, quotes: list[PriceQuote]) -> list[PriceQuote]:
    """Quotes a result cannot carry itself (it has neither a ``prices`` nor a ``notes`` field):
    the CLI prints them beside it."""
    fields = type(result).model_fields
    return [] if ("prices" in fields or "notes" in fields) else quotes


def with_prices(result, quotes: list[PriceQuote]):
    """``result`` with a 'prices used' note (and its ``prices`` field, if it has one)."""
    update: dict = {}
    if "prices" in type(result).model_fields:
        update["prices"] = quotes
    if quotes and "notes" in type(result).model_fields:
        update["notes"] = [*result.notes, "prices used: " + "; ".join(q.text() for q in quotes)]
    return result.model_copy(update=update) if update else result
