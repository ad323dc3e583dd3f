import pytest

from dataset_builder.stats import alpha, summarize
from orca_io.schema import make_record


def _items(*ratings):
    return [make_record(id=str(i), question="q", reference=["r"], candidate="c", ratings=list(r))
            for i, r in enumerate(ratings)]


# Hand computations (Krippendorff 2011, coincidence form):
# units (1,2), (3,3), (5,4): n=6 values, mean 3, sum sq dev 10.
#   D_o = (2 + 0 + 2) / 6 = 2/3; D_e = 2 * 6 * 10 / (6 * 5) = 4; alpha = 1 - (2/3)/4 = 5/6.
# units (1,2), (5,5): n=4, n_1=n_2=1, n_5=2; o_12=o_21=1.
#   interval: sum_{c!=k} n_c n_k d^2 = 2*(1*1*1 + 1*2*16 + 1*2*9) = 102; alpha = 1 - 3*2/102 = 16/17.
#   ordinal:  d(1,2)=(2-1)^2=1, d(1,5)=(4-1.5)^2=6.25, d(2,5)=(3-1.5)^2=2.25;
#             sum = 2*(1 + 12.5 + 4.5) = 36; alpha = 1 - 3*2/36 = 5/6.
# units (1,2), (2,1): all disagreement, alpha = 1 - 3*4/(2*2*2*1)... = -1/2 (both levels).
@pytest.mark.parametrize("ratings, level, expected", [
    (((1, 2), (3, 3), (5, 4)), "interval", 5 / 6),
    (((1, 2), (5, 5)), "interval", 16 / 17),
    (((1, 2), (5, 5)), "ordinal", 5 / 6),
    (((1, 2), (2, 1)), "interval", -0.5),
    (((1, 2), (2, 1)), "ordinal", -0.5),
    (((1, 1), (3, 3), (5, 5, 5)), "interval", 1.0),
])
def test_alpha_hand_computed(ratings, level, expected):
    assert alpha(_items(*ratings), level) == pytest.approx(expected)


def test_alpha_ignores_single_ratings_and_is_undefined_without_pairs():
    assert alpha(_items((1, 2), (5, 5), (3,), ()), "interval") == pytest.approx(16 / 17)
    assert alpha(_items((5,), (1,))) is None
    assert alpha(_items((3, 3), (3, 3))) is None


def test_summary_counts():
    s = summarize(_items((1, 2), (5, 5), (3,)))
    assert s["records"] == 3 and s["ratings_per_item"] == {1: 1, 2: 2}
    assert s["rating_histogram"] == [1, 1, 1, 0, 2]
