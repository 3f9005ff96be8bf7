"""A zero-shot word concept is marked wherever concepts are listed (Explain, hits, the CLI, the
page's data), and a concept's agreement on the bundle's gallery travels with the catalog."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from service.api.grpc.responses import (
    concept_info,
    concept_to_proto,
    explain_response,
    explanation,
)
from service.cli.concept_views import concept_details, format_explanation
from service.cli.search import format_result
from service.engine.explain import activations_of, row_concepts, shared_concepts
from service.engine.search import SearchEngine
from service.results import (
    ConceptActivation,
    ConceptInfo,
    Explanation,
    Hit,
    PrefixSimilarity,
    SearchResult,
    SharedConcept,
)
from training.core.granularity import Granularity


def test_the_coder_marks_the_zero_shot_concepts_it_shows(engine: SearchEngine):
    """The premise built here: the row's strongest shown concept is made a zero-shot entry."""
    ids, values = (a[0] for a in row_concepts(engine.bundle, [0]))
    shown = activations_of(engine.coder, ids, values)
    assert shown and not any(c.zero_shot for c in shown)
    coder = copy.copy(engine.coder)
    coder.catalog = list(coder.catalog)
    first = shown[0].id
    coder.catalog[first] = dataclasses.replace(coder.catalog[first], zero_shot=True)
    marked = activations_of(coder, ids, values)
    assert [(c.id, c.zero_shot) for c in marked] == [(c.id, c.id == first) for c in shown]
    shared = shared_concepts(coder, ids, values, ids, values)
    assert {c.id for c in shared if c.zero_shot} == {first}


def test_the_marks_and_the_agreement_survive_the_wire():
    active = ConceptActivation(3, "+1", "giraffe", 0.5, None, True)
    shared = SharedConcept(3, "+1", "giraffe", 0.5, 0.5, 0.25, "local", True)
    why = Explanation(
        "a", 0, [PrefixSimilarity(Granularity.FULL, 8, 0.5)], [shared], [active], [active], 1
    )
    back = explanation(explain_response(why))
    assert back.query_concepts == [active] and back.shared_concepts == [shared]
    info = ConceptInfo(3, "+1", "dog", 0.3, gallery_agreement=0.25)
    assert concept_info(concept_to_proto(info)).gallery_agreement == np.float32(0.25)
    assert (
        concept_info(concept_to_proto(ConceptInfo(3, "+1", "dog", 0.3))).gallery_agreement is None
    )
    why_hidden = "its agreement fell from 0.90 on its training rows to 0.10 on this gallery"
    hidden = ConceptInfo(3, "+1", "dog", 0.3, below_floor=True, hidden_on_gallery=why_hidden)
    assert concept_info(concept_to_proto(hidden)).hidden_on_gallery == why_hidden


def test_the_cli_marks_zero_shot_words_and_shows_the_agreement():
    active = ConceptActivation(3, "+1", "giraffe", 0.5, None, True)
    shared = SharedConcept(3, "+1", "giraffe", 0.4, 0.5, 0.2, None, True)
    why = Explanation(
        "a", 0, [PrefixSimilarity(Granularity.FULL, 8, 0.5)], [shared], [active], [active], 1
    )
    text = format_explanation(why)
    assert "giraffe (zero-shot) 0.500" in text and "giraffe (zero-shot)" in text.split("\n")[-4]
    hit = Hit("a", 0.9, 0, concepts=[active], shared_concepts=[shared])
    listed = format_result(SearchResult(Granularity.FULL, 8, "", [hit]), [], explain=True)
    assert "giraffe*" in listed
    details = concept_details(ConceptInfo(3, "+1", "dog", 0.3, gallery_agreement=0.25))
    assert "agreement 0.250" in details
    assert "agreement" not in concept_details(ConceptInfo(3, "+1", "dog", 0.3))
    why_hidden = "its agreement fell from 0.90 on its training rows to 0.10 on this gallery"
    hidden = ConceptInfo(3, "+1", "dog", 0.3, below_floor=True, hidden_on_gallery=why_hidden)
    assert why_hidden in concept_details(hidden) and "below floor" not in concept_details(hidden)
    floor_only = concept_details(ConceptInfo(3, "+1", "dog", 0.3, below_floor=True))
    assert "below floor" in floor_only and "hidden here" not in floor_only
