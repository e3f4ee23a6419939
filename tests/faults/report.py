"""Render the last fault run (JSON from `GRIDROUTE_FAULTS_REPORT`) into docs/reliability.md.

    python -m tests.faults.report .faults-last-run.json docs/reliability.md

The table replaces whatever stands between the two marker lines of the page.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

BEGIN = "<!-- fault-table:begin -->"
END = "<!-- fault-table:end -->"


def _classes(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "0"


def _notes(row: dict[str, object]) -> str:
    return f" ({row['notes']})" if row.get("notes") else ""


def _duplicated(row: dict[str, object]) -> str:
    if row.get("duplicated") is None:
        return "not checked"
    return f"{row['duplicated']} of {row['ids_checked']}"


def table(doc: dict[str, object]) -> str:
    rows = doc["rows"]
    assert isinstance(rows, list)
    out = [
        f"Last run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; partitions by "
        f"{doc['mechanism']}.",
        "",
        "| scenario | fault by | sent | served | refused | failed | max latency s | served by "
        "| begun at a second site after its bytes reached the client |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        by_site = ", ".join(f"{k} {v}" for k, v in sorted(r["by_site"].items()))
        out.append(
            f"| {r['scenario']}{_notes(r)} | {r['mechanism']} | {r['sent']} | {r['served']} | "
            f"{_classes(r['refused'])} | {_classes(r['failed'])} | {r['max_latency_s']} | "
            f"{by_site} | {_duplicated(r)} |"
        )
    return "\n".join(out)


def main(src: str, page: str) -> None:
    doc = json.loads(Path(src).read_text())
    path = Path(page)
    text = path.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    path.write_text(f"{head}{BEGIN}\n{table(doc)}\n{END}{tail}")
    print(table(doc))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
