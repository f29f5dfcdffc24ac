"""Parsing Kubernetes resource quantities ("500m", "128Mi", "1.5G", "2e3")."""

from __future__ import annotations

import math
import re
from decimal import Decimal

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_PATTERN = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse(quantity: str | int | float) -> Decimal:
    """The value of a quantity as a Decimal (e.g. "500m" -> 0.5, "1Ki" -> 1024)."""
    if isinstance(quantity, int | float):
        return Decimal(str(quantity))
    match = _PATTERN.match(quantity.strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(f"invalid quantity {quantity!r}")
    return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]


def divide_ceil(quantity: str | int | float, divisor: str | int | float = 1) -> int:
    """ceil(quantity / divisor), as the kubelet reports resourceFieldRef values (at least 1)."""
    value = parse(quantity) / parse(divisor or 1)
    return max(1, math.ceil(value)) if value > 0 else 0
