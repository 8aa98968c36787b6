"""Rules of money/catalog.py that the mutation run (#62) found no selected test holding."""

import pytest

from iteralab.core.errors import UserError
from iteralab.money.catalog import load_catalog, parse_catalog, quote
from tests.factory import CATALOG_HEADER


def test_a_quote_for_a_unit_that_is_neither_a_corpus_nor_a_model_is_refused_in_one_sentence():
    """Regression for #62: quote() refuses an unknown unit, naming both units a result can be and the one given."""
    with pytest.raises(UserError) as refused:
        quote(load_catalog(), gpu="rtx-4090", days=3, lots=1, accepted_results=2, unit="token")
    assert str(refused.value) == "a result is a validated corpus or a validated model, not 'token'"


def test_a_quoted_field_keeps_its_line_break_as_written():
    """Regression for #62: the catalog's CSV is read without translating line breaks (newline=""), so a quoted field
    keeps a carriage return and line feed as written, and the row after it is counted on its own line."""
    catalog = parse_catalog(CATALOG_HEADER + 'v1,x,"X\r\nY",1,,3,10.00,USD\r\nv1,x,"X\r\nY",1,,7,20.00,USD\r\n', "c.csv")
    assert catalog.gpus["x"].name == "X\r\nY"
    assert [(price.days, price.line) for price in catalog.prices.values()] == [(3, 3), (7, 5)]
