"""The query cache's keys and values: normalised texts, per-encoder keys, checked rows."""

from __future__ import annotations

import numpy as np

from service.query.keys import cache_key, decode_value, encode_value, normalise_query


def test_queries_equal_after_normalisation_share_a_key():
    assert normalise_query("  A\tRed\u00a0DOG \n") == "a red dog"
    assert normalise_query("ＡＮ ＯＬＤ ＣＡＲ") == "an old car"  # fullwidth (NFKC)
    assert normalise_query("ﬁsh STRASSE Straße") == "fish strasse strasse"  # ligature, casefold
    variants = ["a red dog", "A RED DOG", " a  red\tdog ", "ａ red ｄｏｇ"]
    assert len({cache_key("minilm", v) for v in variants}) == 1
    assert cache_key("minilm", "a red dog") != cache_key("open_clip:ViT-B-32@x", "a red dog")
    assert cache_key("minilm", "a red dog") != cache_key("minilm", "a red cat")
    for text in [*variants, "ﬁsh", "ǅemal", "Ⅻ o'clock", "ΣΑΣ"]:
        once = normalise_query(text)
        assert normalise_query(once) == once


def test_values_round_trip_and_a_wrong_size_or_nan_is_no_value():
    row = np.linspace(-1, 1, 8, dtype=np.float32)
    raw = encode_value(row)
    assert len(raw) == 32
    np.testing.assert_array_equal(decode_value(raw, 8), row)
    assert decode_value(raw, 7) is None and decode_value(raw[:-1], 8) is None
    assert decode_value(None, 8) is None
    assert decode_value(encode_value(np.full(8, np.nan, dtype=np.float32)), 8) is None
