"""The online-softmax explorer takes what its text says it takes: a fully masked row gives zeros,
and a refusal names the vector x the learner typed, not an internal parameter."""

import numpy as np
import pytest

from attnlab.explore.flash.online_softmax import parse_vector, softmax_steps


def test_a_fully_masked_row_is_zeros_not_refused():
    r = softmax_steps("-inf, -inf, -inf", chunk=2)
    assert np.array_equal(r.p, np.zeros(3)) and r.error == 0.0
    assert all(s.m == -np.inf and s.l == 0.0 for s in r.steps)


@pytest.mark.parametrize("typed", ["", "1, nan", "1, inf", "a, b", "1e301"])
def test_refusals_name_x(typed):
    with pytest.raises(ValueError, match=r"^x "):
        parse_vector(typed)
