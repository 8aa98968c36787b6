"""GPU rental price catalog and package cost in exact decimal money."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from importlib import resources
from pathlib import Path

from iteralab.core.errors import UserError

PACKAGE_DAYS = (3, 7, 30)
COLUMNS = (
    "catalog_version", "gpu", "gpu_name", "cards_per_lot",
    "memory_per_card_gb", "days", "price_per_lot", "currency",
)
DEFAULT_CATALOG = "catalog-2026-09-24.csv"
CENT = Decimal("0.01")
ROUNDING = ROUND_HALF_UP  # money and hours alike: two places, half up, as prices are stated
GIB = 2**30


def money(value: Decimal) -> Decimal:
    """Round VALUE to cents, half up, as prices are stated."""
    return value.quantize(CENT, rounding=ROUNDING)


def lots_price(price_per_lot: Decimal, lots: int) -> Decimal:
    """Return what LOTS lots cost: the lot price already covers every card of a lot, so cards never multiply it."""
    return money(price_per_lot * lots)


def gpu_slug(name: str) -> str:
    """Turn 'RTX 4090' or 'rtx_4090' into the catalog's slug 'rtx-4090'."""
    return re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")


def gb_to_gib(gigabytes: Decimal) -> Decimal:
    """Convert decimal gigabytes (1e9 B) to binary gibibytes (2^30 B), two places."""
    return money(gigabytes * Decimal(10**9) / Decimal(GIB))


@dataclass(frozen=True)
class Gpu:
    """A GPU model as the catalog states it."""

    slug: str
    name: str
    cards_per_lot: int
    memory_per_card_gb: Decimal | None  # None: the catalog does not state it


@dataclass(frozen=True)
class Price:
    """One catalog row: a package of DAYS for one lot of GPU."""

    gpu: Gpu
    days: int
    price_per_lot: Decimal
    currency: str
    line: int


@dataclass(frozen=True)
class Catalog:
    """A versioned price catalog read from one CSV file."""

    version: str
    source: str
    gpus: dict[str, Gpu]
    prices: dict[tuple[str, int], Price]

    def gpu(self, name: str) -> Gpu:
        """Return the GPU called NAME or raise a UserError listing the catalog's GPUs."""
        slug = gpu_slug(name)
        if slug not in self.gpus:
            known = ", ".join(sorted(self.gpus))
            raise UserError(f"GPU {name!r} is not in catalog {self.version} ({self.source}); it lists: {known}")
        return self.gpus[slug]

    def price(self, name: str, days: int) -> Price:
        """Return the price of a DAYS package of GPU or say what the catalog has for it."""
        gpu = self.gpu(name)
        if (gpu.slug, days) not in self.prices:
            listed = self.options(gpu.slug)
            raise UserError(
                f"catalog {self.version} does not list a {days}-day package for {gpu.name}; "
                f"it lists: {listed}"
            )
        return self.prices[(gpu.slug, days)]

    def listed(self, slug: str) -> list[Price]:
        """Return the packages listed for one GPU, cheapest lot price first."""
        return sorted((p for p in self.prices.values() if p.gpu.slug == slug), key=lambda p: p.price_per_lot)

    def cheapest_covering(self, slug: str, hours) -> Price | None:
        """Return the cheapest single package of one GPU that lasts at least HOURS (any, when HOURS is None)."""
        return next((p for p in self.listed(slug) if hours is None or p.days * 24 >= hours), None)

    def options(self, slug: str) -> str:
        """Describe the packages the catalog lists for one GPU."""
        rows = sorted((p for p in self.prices.values() if p.gpu.slug == slug), key=lambda p: p.days)
        return ", ".join(f"{p.days} days at {p.price_per_lot} {p.currency} per lot" for p in rows)

    def snapshot(self) -> dict:
        """Return the catalog as plain data for records and bundles."""
        return {
            "version": self.version,
            "source": self.source,
            "rows": [
                {
                    "gpu": p.gpu.slug, "gpu_name": p.gpu.name, "cards_per_lot": p.gpu.cards_per_lot,
                    "memory_per_card_gb": None if p.gpu.memory_per_card_gb is None else str(p.gpu.memory_per_card_gb),
                    "days": p.days, "price_per_lot": str(p.price_per_lot), "currency": p.currency,
                }
                for p in sorted(self.prices.values(), key=lambda p: (p.gpu.slug, p.days))
            ],
        }


def load_catalog(path: Path | str | None = None) -> Catalog:
    """Read the catalog at PATH, or the one shipped with the package when PATH is None."""
    if path is None:
        text = (resources.files("iteralab") / "data" / DEFAULT_CATALOG).read_text(encoding="utf-8")
        return parse_catalog(text, DEFAULT_CATALOG)
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise UserError(f"catalog file {path} does not exist") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; save the catalog as UTF-8 CSV") from None
    except OSError as error:
        raise UserError(f"cannot read catalog {path}: {error.strerror or error}") from None
    return parse_catalog(text, str(path))


def parse_catalog(text: str, source: str) -> Catalog:
    """Parse catalog CSV TEXT; refuse anything malformed with file, line and reason."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    missing = [column for column in COLUMNS if column not in header]
    if missing:
        raise UserError(f"{source}:1: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}")
    versions, gpus, prices = set(), {}, {}
    for row in reader:
        line = reader.line_num
        if None in row or any(value is None for value in row.values()):
            raise UserError(f"{source}:{line}: wrong number of fields; expected {len(header)}")
        row = {key: value.strip() for key, value in row.items()}
        where = f"{source}:{line}"
        if not row["catalog_version"]:
            raise UserError(f"{where}: catalog_version is empty")
        versions.add(row["catalog_version"])
        gpu = _parse_gpu(row, where)
        if gpu.slug in gpus and gpus[gpu.slug] != gpu:
            raise UserError(f"{where}: {gpu.name} is described differently on an earlier line (name, cards or memory)")
        gpus[gpu.slug] = gpu
        days = _parse_int(row["days"], "days", where)
        if days not in PACKAGE_DAYS:
            raise UserError(f"{where}: days {days} is not a package length; use one of {', '.join(map(str, PACKAGE_DAYS))}")
        if (gpu.slug, days) in prices:
            raise UserError(f"{where}: duplicate row for {gpu.name} {days} days (first at line {prices[(gpu.slug, days)].line})")
        currency = row["currency"]
        if not re.fullmatch(r"[A-Z]{3}", currency):
            raise UserError(f"{where}: currency {currency!r} must be a three-letter code such as USD")
        first = next(iter(prices.values()), None)
        if first is not None and currency != first.currency:
            # Plans of different cards are compared by price: one catalog, one currency, never converted here.
            raise UserError(f"{where}: currency {currency} differs from {first.currency} at line {first.line}; a catalog "
                            "holds one currency: convert the prices, or keep one catalog per currency")
        prices[(gpu.slug, days)] = Price(gpu, days, _parse_price(row["price_per_lot"], where), currency, line)
    if not prices:
        raise UserError(f"{source}: the catalog has no price rows")
    if len(versions) != 1:
        raise UserError(f"{source}: rows mix catalog versions {', '.join(sorted(versions))}; keep one version per file")
    return Catalog(versions.pop(), source, gpus, prices)


def _parse_gpu(row: dict, where: str) -> Gpu:
    slug = gpu_slug(row["gpu"])
    if not slug:
        raise UserError(f"{where}: gpu is empty")
    memory = row["memory_per_card_gb"]
    memory_gb = None
    if memory:
        memory_gb = _parse_decimal(memory, "memory_per_card_gb", where)
        if memory_gb <= 0:
            raise UserError(f"{where}: memory_per_card_gb must be positive or empty (not stated)")
    cards = _parse_int(row["cards_per_lot"], "cards_per_lot", where)
    if cards < 1:
        raise UserError(f"{where}: cards_per_lot must be at least 1")
    return Gpu(slug, row["gpu_name"] or row["gpu"], cards, memory_gb)


def _parse_int(value: str, column: str, where: str) -> int:
    if not re.fullmatch(r"-?\d+", value):
        raise UserError(f"{where}: {column} {value!r} is not a whole number")
    return int(value)


def _parse_decimal(value: str, column: str, where: str) -> Decimal:
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise UserError(f"{where}: {column} {value!r} is not a number") from None
    if not number.is_finite():
        raise UserError(f"{where}: {column} {value!r} is not a finite number")
    return number


def _parse_price(value: str, where: str) -> Decimal:
    if not re.fullmatch(r"-?\d+(\.\d{1,2})?", value):
        raise UserError(
            f"{where}: price_per_lot {value!r} is not a price; write digits with at most two "
            "decimals and no thousands separator, e.g. 2071.00"
        )
    price = Decimal(value)
    if price < 0:
        raise UserError(f"{where}: price_per_lot {value} is negative")
    if value.startswith("-"):  # Decimal keeps the sign of -0: every total of the lot would be shown as -0.00
        raise UserError(f"{where}: price_per_lot {value} is zero written with a minus sign; write 0.00")
    return money(price)


@dataclass(frozen=True)
class Quote:
    """The package spend for LOTS lots of one GPU for DAYS days."""

    catalog_version: str
    price: Price
    lots: int
    total: Decimal
    accepted_results: int | None
    cost_per_validated_corpus: Decimal | None  # the cost per validated UNIT, whichever it is
    undefined_reason: str | None
    unit: str = "corpus"  # what a result is: a validated corpus, or (an adaptation's) a validated model

    @property
    def gpus(self) -> int:
        """Return how many cards the lots hold."""
        return self.price.gpu.cards_per_lot * self.lots


UNITS = ("corpus", "model")  # what an accepted result is: a validated corpus, or a validated model (#61)


def quote(catalog: Catalog, *, gpu: str, days: int, lots: int, accepted_results: int | None = None,
          unit: str = "corpus") -> Quote:
    """Price LOTS lots of GPU for DAYS days; the lot price already covers all its cards. UNIT: what a result is."""
    if isinstance(lots, bool) or not isinstance(lots, int) or lots < 1:
        raise UserError(f"lots must be a whole number of at least 1, not {lots!r}")
    if accepted_results is not None and (isinstance(accepted_results, bool) or not isinstance(accepted_results, int) or accepted_results < 0):
        raise UserError(f"accepted results must be a whole number of at least 0, not {accepted_results!r}")
    price = catalog.price(gpu, days)
    total = lots_price(price.price_per_lot, lots)
    if unit not in UNITS:
        raise UserError(f"a result is a validated {' or a validated '.join(UNITS)}, not {unit!r}")
    per_result, reason = cost_per_validated_corpus(total, accepted_results, unit)
    return Quote(catalog.version, price, lots, total, accepted_results, per_result, reason, unit)


def cost_per_validated_corpus(total: Decimal, accepted: int | None, unit: str = "corpus") -> tuple[Decimal | None, str | None]:
    """Divide the spend by accepted deliverables (validated corpora, or models); undefined (with the reason) at none."""
    if accepted is None:
        return None, "the number of accepted results was not given"
    if accepted == 0:
        return None, f"undefined: no result was accepted, so the spend buys no validated {unit}"
    return money(total / accepted), None


def describe_quote(result: Quote) -> str:
    """Say what the package costs, and the cost per validated corpus (or model) when the accepted count was given."""
    price, gpu = result.price, result.price.gpu
    lines = [
        f"{result.total} {price.currency} for {result.gpus} GPU{'s' * (result.gpus != 1)}: "
        f"{result.lots} lot{'s' * (result.lots != 1)} of {gpu.name} x {price.days} days "
        f"at {price.price_per_lot} {price.currency} per lot "
        f"({gpu.cards_per_lot} card{'s' * (gpu.cards_per_lot != 1)} per lot, catalog {result.catalog_version})",
        "The whole package is paid even if part of the period stays unused.",
    ]
    if result.accepted_results is not None:
        if result.cost_per_validated_corpus is None:
            lines.append(f"Cost per validated {result.unit}: {result.undefined_reason}; the spend of {result.total} "
                         f"{price.currency} stands.")
        else:
            lines.append(
                f"Cost per validated {result.unit}: {result.cost_per_validated_corpus} {price.currency} "
                f"({result.total} / {result.accepted_results} accepted result{'s' * (result.accepted_results != 1)})"
            )
    return "\n".join(lines)


def quote_data(result: Quote) -> dict:
    """Return the quote as plain data, amounts as decimal strings."""
    price, gpu = result.price, result.price.gpu
    per_corpus = result.cost_per_validated_corpus
    return {
        "catalog_version": result.catalog_version, "gpu": gpu.slug, "gpu_name": gpu.name,
        "days": price.days, "lots": result.lots, "cards_per_lot": gpu.cards_per_lot, "gpus": result.gpus,
        "price_per_lot": str(price.price_per_lot), "total": str(result.total), "currency": price.currency,
        "accepted_results": result.accepted_results,
        # The two keys name the unit: cost_per_validated_model for models, where "unit" says so (a corpus's keys as always)
        **({"unit": result.unit} if result.unit != "corpus" else {}),
        f"cost_per_validated_{result.unit}": None if per_corpus is None else str(per_corpus),
        f"cost_per_validated_{result.unit}_note": result.undefined_reason if result.accepted_results is not None else None,
    }
