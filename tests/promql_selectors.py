"""The vector selectors of a PromQL expression (`name{matchers}`), found well enough for
the expressions gridroute ships: an alert's expression returns nothing while it is not
firing, so a live check asks each selector in it for data instead."""

from __future__ import annotations

import re

_BRACES = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_TOKEN = re.compile(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\x00(\d+)\x00)?\s*(\()?")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "inf", "nan", "group_left", "group_right"}
)


def selectors(expr: str) -> list[str]:
    """Each `name{...}` the expression reads, in order, without duplicates."""
    braces: list[str] = []

    def hold(m: re.Match[str]) -> str:
        braces.append(m.group(0))
        return f"\x00{len(braces) - 1}\x00"

    text = _BRACES.sub(hold, expr)
    text = _GROUPING.sub(" ", text)
    text = _RANGE.sub(" ", text)
    out: list[str] = []
    for m in _TOKEN.finditer(text):
        name, brace, call = m.group(1), m.group(2), m.group(3)
        if call or name in _KEYWORDS:
            continue
        sel = name + (braces[int(brace)] if brace is not None else "")
        if sel not in out:
            out.append(sel)
    return out
