"""What kind of query a served call is, for the micro-batcher (service/serving/batching.py):
what a lone one may run beside on the event loop, and what single queries are batched with."""

from __future__ import annotations

from service.query.routing import route_text
from service.serving.served_engine import PinnedQuery
from training.core.errors import InputError
from training.core.granularity import AUTO


def query_kind(item: PinnedQuery) -> tuple[str, str, str, bool, int] | None:
    """The kind of a query with no encoder call to make (a raw vector, or a text the local
    query cache holds), which may run on the event loop when the micro-batcher finds nothing
    else to do while lone queries of its kind cost at most `BatchingConfig.inline_ms`: what it
    is, its granularity, its plan, whether it is filtered or grouped — a full-length or
    filtered query does not keep an object query off the loop, nor ride on its cost — and the
    bundle version it runs on (a new version's costs are measured anew). An AUTO text's
    granularity is the one its route picks, so that "a dog" and a scene description are not
    one kind. None for a query that calls the encoder, or an AUTO text its route refuses (its
    search says why). Also what singles are batched by (service/serving/batch_order.py)."""
    query = item.query
    if query.vector is not None:
        what = "vector"
    else:
        cache, encoder = item.engine.cache, item.engine.encoder
        if query.text is None or cache is None or encoder is None:
            return None
        if not cache.has_local(encoder.id, query.text):
            return None
        what = "text"
    granularity = query.granularity
    if query.text is not None and granularity == AUTO:
        try:
            granularity = route_text(query.text).granularity.value
        except InputError:
            return None
    narrowed = bool(query.require or query.exclude or query.where or query.group_by)
    return what, granularity, query.plan.kind, narrowed, item.engine.bundle.version
