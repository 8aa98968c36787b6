"""Rules of money/catalog.py that the mutation run (#62) found no selected test holding."""

import pytest

from iteralab.core.errors import UserError
from iteralab.money.catalog import load_catalog, quote


def test_a_quote_for_a_unit_that_is_neither_a_corpus_nor_a_model_is_refused_in_one_sentence():
    """Regression for #62: quote() refuses an unknown unit, naming both units a result can be and the one given."""
    with pytest.raises(UserError) as refused:
        quote(load_catalog(), gpu="rtx-4090", days=3, lots=1, accepted_results=2, unit="token")
    assert str(refused.value) == "a result is a validated corpus or a validated model, not 'token'"
