"""docs/trafficmap.md's "Why a cluster's weight is zero" table is the code's table."""

from pathlib import Path

from gridroute.core.zeroweight import RULES, markdown_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "trafficmap.md"
START = (
    "<!-- zero-weight-table: generated from gridroute.core.zeroweight.RULES; a test checks it -->\n"
)
END = "<!-- /zero-weight-table -->"


def test_docs_table_is_generated_from_the_rules() -> None:
    text = DOC.read_text()
    block = text[text.index(START) + len(START) : text.index(END)]
    assert block == markdown_table(), (
        "regenerate with: python -c 'from gridroute.core.zeroweight import markdown_table; "
        'print(markdown_table(), end="")\''
    )
    assert len(block.strip().splitlines()) == len(RULES) + 2
