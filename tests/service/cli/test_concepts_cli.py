"""`strata concepts list | search | show` on a bundle folder and on a live server, and
`strata explain` against the server: what they print, and one-line errors with near misses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from search_gallery import LANTERN, LANTERN_RUNNER_UPS, written_concepts

from service.api.background import BackgroundServer
from service.api.grpc import responses
from service.api.grpc.client import StrataClient
from service.cli.concepts import concept_details
from service.engine.search import SearchEngine
from service.results import ConceptInfo


def _typo(name: str) -> str:
    """A near miss of a name: its last two letters swapped, or a letter added to a short one."""
    return name[:-2] + name[-1] + name[-2] if len(name) > 3 else name + "x"


def test_list_reads_the_bundle_and_the_server_alike(
    strata_in_process, text_bundle: Path, server: BackgroundServer, engine: SearchEngine
):
    catalog = engine.coder.catalog
    code, offline, err = strata_in_process(
        "concepts", "list", "--bundles", str(text_bundle), "--sort", "score", "--limit", "5"
    )
    assert code == 0, err
    lines = offline.splitlines()
    assert lines[0].startswith(f"{len(catalog)} concepts in bundle ") and "by score" in lines[0]
    assert lines[1].split()[:3] == ["label", "name", "score"] and "top example" in lines[1]
    best = sorted(catalog, key=lambda e: -e.score)[:5]
    assert [line.split()[0] for line in lines[2:7]] == [e.label for e in best]
    assert lines[7] == f"… {len(catalog) - 5} more (--limit 0 shows all)"
    code, online, err = strata_in_process(
        "concepts", "list", "--target", server.target, "--sort", "score", "--limit", "5"
    )
    assert code == 0, err
    assert online.splitlines()[1:] == lines[1:]  # one code path: same table either way
    code, out, _ = strata_in_process(
        "concepts", "list", "--bundles", str(text_bundle), "--limit", "0", "--json"
    )
    listed = json.loads(out)
    assert [c["id"] for c in listed] == list(range(len(catalog)))
    rows = {c["id"]: c["active_rows"] for c in listed}
    assert all(rows[e.concept] == len(engine.bundle.postings(e.concept)[0]) for e in catalog)


def test_show_gives_the_whole_entry(strata_in_process, text_bundle: Path, engine: SearchEngine):
    entry, unnamed = written_concepts(engine.coder.catalog)
    code, out, err = strata_in_process(
        "concepts", "show", entry.label, "--bundles", str(text_bundle)
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{entry.label}  {entry.name}"
    assert f"score        {entry.score:.3f}" in out
    assert f"active rows  {len(engine.bundle.postings(entry.concept)[0])} in this bundle" in out
    assert "runner-ups   " + ", ".join(f"{w} {s:.3f}" for w, s in LANTERN_RUNNER_UPS) in out
    assert f"precision    {entry.precision:.3f} (held out)" in out
    examples = [line for line in lines if line.startswith("    ")]
    assert len(examples) == len(entry.examples) and entry.examples[0]["id"] in examples[0]
    same_name = [e for e in engine.coder.catalog if e.name == entry.name]
    code, out, _ = strata_in_process("concepts", "show", entry.name, "--bundles", str(text_bundle))
    assert code == 0 and out.count(f"  {entry.name}\n") == len(same_name)
    code, out, err = strata_in_process(
        "concepts", "show", unnamed.label, "--bundles", str(text_bundle)
    )
    assert code == 0, err
    assert out.split()[0] == unnamed.label and "found by label only" in out


def test_an_unknown_name_fails_in_one_line_with_its_near_misses(
    strata_in_process, text_bundle: Path, server: BackgroundServer, engine: SearchEngine
):
    entry, _ = written_concepts(engine.coder.catalog)
    typo = _typo(entry.name)
    assert typo not in {e.name for e in engine.coder.catalog}
    for where in (["--bundles", str(text_bundle)], ["--target", server.target]):
        code, out, err = strata_in_process("concepts", "show", typo, *where)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("strata: error: ")
        assert f"no concept is named {typo!r}; did you mean: " in err
        assert err.split("did you mean: ")[1].startswith(f"{entry.name} (")  # nearest first
    # the search filter says the same, from the server
    code, _, err = strata_in_process(
        "search", "a dog", "--require", typo, "--target", server.target
    )
    assert code == 2 and err.startswith("strata: error: INVALID_ARGUMENT: ")
    assert f"did you mean: {entry.name} (" in err


def test_search_finds_names_runner_ups_and_near_misses(
    strata_in_process, text_bundle: Path, engine: SearchEngine
):
    entry, _ = written_concepts(engine.coder.catalog)
    code, out, err = strata_in_process(
        "concepts", "search", entry.name, "--bundles", str(text_bundle), "--limit", "0"
    )
    assert code == 0, err
    rows = out.splitlines()[2:]
    assert rows[0].split()[:2] == [entry.label, LANTERN] and rows[0].endswith("name")
    code, out, _ = strata_in_process(
        "concepts", "search", _typo(entry.name), "--bundles", str(text_bundle)
    )
    assert code == 0
    near = [r for r in out.splitlines() if r.split()[:2] == [entry.label, entry.name]]
    assert near and "name ≈ " in near[0]
    runner_up = LANTERN_RUNNER_UPS[0][0]  # a word in no concept's name
    code, out, _ = strata_in_process("concepts", "search", runner_up, "--bundles", str(text_bundle))
    assert code == 0
    assert out.splitlines()[2].split()[:2] == [entry.label, LANTERN]
    assert out.splitlines()[2].endswith(f"runner-up {runner_up}")
    code, out, _ = strata_in_process("concepts", "search", "qqqqqq", "--bundles", str(text_bundle))
    assert code == 0 and out.startswith("no concept name in bundle ")


def test_explain_prints_the_cosine_at_each_prefix_and_shared_concepts(
    strata_in_process, server: BackgroundServer, engine: SearchEngine
):
    # a caption of the gallery as the query: its best hit is that row (cosine 1 at the full
    # prefix), whose active concepts are the query's own, whatever the model
    query = engine.bundle.metadata(np.array([0])).column("caption").to_pylist()[0]
    with StrataClient(server.target, timeout=60) as client:
        hit = client.search(query, granularity="full", k=1).hits[0]
        why = client.explain(query, item_id=hit.id)
    code, out, err = strata_in_process("explain", query, "--id", hit.id, "--target", server.target)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"item         {hit.id} (row {hit.row}, bundle version {why.bundle_version})"
    table = lines[lines.index("cosine by prefix") + 2 :][: len(why.similarities)]
    assert [line.split() for line in table] == [
        [s.granularity.value, str(s.prefix_length), f"{s.cosine:.3f}"] for s in why.similarities
    ]
    assert [s.prefix_length for s in why.similarities] == engine.bundle.prefix_lengths
    assert f"shared concepts ({len(why.shared_concepts)}; " in out
    assert why.shared_concepts  # the query's concepts are its own row's
    top = why.shared_concepts[0]
    first = lines[lines.index(next(x for x in lines if x.startswith("shared concepts"))) + 2]
    assert first.split()[0] == top.label and first.endswith(f"{top.contribution:.3f}")
    code, by_row, _ = strata_in_process(
        "explain", query, "--row", str(hit.row), "--target", server.target
    )
    assert code == 0 and by_row == out
    for args, message in (
        (["a red dog"], "name the item: --id ID or --row N"),
        (["--id", hit.id], "give a text QUERY or --image FILE"),
        (["a red dog", "--id", "no-such-item"], "NOT_FOUND: no item 'no-such-item'"),
    ):
        code, _, err = strata_in_process("explain", *args, "--target", server.target)
        assert code == 2 and err.startswith("strata: error: ") and message in err, err


@pytest.mark.parametrize(("precision", "named"), [(0.625, True), (0.125, False), (None, True)])
def test_a_served_concept_keeps_its_names_precision_and_whether_it_is_named(
    precision: float | None, named: bool
):
    info = ConceptInfo(
        id=7,
        label="-3",
        name="dog" if named else "-3",
        score=0.4,
        precision=precision,
        named=named,
    )
    message = responses.concept_to_proto(info)
    assert message.HasField("precision") == (precision is not None)
    back = responses.concept_info(message)
    assert (back.precision, back.named, back.name) == (precision, named, info.name)
    shown = concept_details(back)
    assert ("precision    0.625 (held out)" in shown) == (precision == 0.625)
    assert ("found by label only" in shown) == (not named)
