"""`strata search` against a live server, and `strata serve` as a user runs it."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

import pytest
from http_helpers import call
from search_gallery import build_image_bundle

from service.api.background import BackgroundServer
from service.api.grpc import responses
from service.api.grpc.client import StrataClient
from service.cli.search import format_result
from service.results import SearchResult
from training.core.granularity import Granularity


def test_search_prints_a_table_of_hits(strata_in_process, server: BackgroundServer):
    code, out, _ = strata_in_process(
        "search", "a red dog", "--top-k", "3", "--target", server.target
    )
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("granularity  attribute (prefix 48): attribute words (red)")
    header = next(line for line in lines if line.startswith("#"))
    assert header.split() == ["#", "score", "id", "caption"]
    rows = [line for line in lines if line[:1].isdigit()]
    assert len(rows) == 3 and all("scene-" in r for r in rows)


def test_search_with_filters_and_explain(strata_in_process, server, engine):
    common = max(engine.coder.catalog, key=lambda e: len(engine.bundle.postings(e.concept)[0]))
    code, out, _ = strata_in_process(
        "search",
        "a dog",
        "-g",
        "object",
        "-k",
        "4",
        "--require",
        common.label,
        "--explain",
        "--target",
        server.target,
    )
    assert code == 0, out
    assert "granularity  object (prefix 24): requested" in out
    assert f"filter       {len(engine.bundle.postings(common.concept)[0])} rows allowed" in out
    assert "concepts" in out and "shared (contribution)" in out and "query        " in out
    code, out, _ = strata_in_process(
        "search",
        "a dog",
        "--top-k",
        "2",
        "--json",
        "--fields",
        "subject",
        "--target",
        server.target,
    )
    data = json.loads(out)
    assert len(data["hits"]) == 2 and set(data["hits"][0]["metadata"]) == {"subject"}


def test_search_runs_the_plan_asked_for_and_says_which_ran(strata_in_process, server):
    code, out, _ = strata_in_process(
        "search",
        "a dog on the beach at dusk",
        "-g",
        "full",
        "--top-k",
        "3",
        "--shortlist-prefix",
        "48",
        "--factor",
        "5",
        "--target",
        server.target,
    )
    assert code == 0, out
    assert "plan         funnel: 15 rows at prefix 48, reranked exactly at 384 (requested)" in out
    code, out, _ = strata_in_process(
        "search", "a dog", "--plan", "direct", "--target", server.target
    )
    assert code == 0 and "plan         direct at prefix 24 (requested)" in out
    code, _, err = strata_in_process(
        "search", "a dog", "--plan", "direct", "--factor", "3", "--target", server.target
    )
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "strata: error: INVALID_ARGUMENT: a direct plan takes no shortlist prefix or factor "
        "(ask for a funnel)"
    )
    code, _, err = strata_in_process("search", "a dog", "--plan", "fast", "--target", server.target)
    assert code == 2 and "unknown search plan 'fast'; choose from auto, direct, funnel" in err


def test_search_errors_are_one_line(strata_in_process, server: BackgroundServer):
    code, _, err = strata_in_process(
        "search", "a dog", "--require", "unicorn-that-is-no-concept", "--target", server.target
    )
    assert code == 2 and "Traceback" not in err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("strata: error: INVALID_ARGUMENT: unknown concept 'unicorn-that-is-no-concept'")
    )
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    code, _, err = strata_in_process(
        "search", "a dog", "--target", f"127.0.0.1:{free}", "--timeout", "5"
    )
    assert code == 2 and "UNAVAILABLE: no Strata server answers at" in err
    code, _, err = strata_in_process("search", "--target", server.target)
    assert code == 2 and "give a text QUERY or --image FILE" in err


def test_search_asks_for_a_recall(strata_in_process, server: BackgroundServer):
    """The text bundle's indexes are Flat (exact): any recall is met; outside (0, 1] refused."""
    code, out, _ = strata_in_process(
        "search", "a dog", "-k", "2", "--min-recall", "1", "--target", server.target
    )
    assert code == 0 and len([line for line in out.splitlines() if line[:1].isdigit()]) == 2
    code, _, err = strata_in_process(
        "search", "a dog", "--min-recall", "1.5", "--target", server.target
    )
    assert code == 2 and err.strip().splitlines()[-1] == (
        "strata: error: INVALID_ARGUMENT: min_recall must lie in (0, 1], got 1.5"
    )


@pytest.mark.slow
def test_serve_logs_its_address_serves_and_stops_on_ctrl_c(
    tmp_path: Path, tiny_clip, write_png, serve_process
):
    bundles = build_image_bundle(tmp_path, tiny_clip, write_png, per_colour=2)
    process = serve_process(
        "--bundles", str(bundles), "--port", "0", "--device", "cpu", "--max-wait-ms", "1"
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(f"serving {bundles}") and "Ctrl-C stops" in line, (
            line + process.stderr.read() if process.poll() is not None else line
        )
        target = line.split(" on ")[-1].split(";")[0]
        with StrataClient(target) as client:
            picture = tmp_path / "images" / "blue-1.png"
            assert client.search(image=picture, k=1).ids == ["blue-1"]
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.strip().endswith("stopped") and "Traceback" not in err


@pytest.mark.slow
def test_serve_with_http_port_serves_the_page_and_the_api(
    tmp_path: Path, tiny_clip, write_png, serve_process
):
    bundles = build_image_bundle(tmp_path, tiny_clip, write_png, per_colour=2)
    process = serve_process(
        "--bundles", str(bundles), "--port", "0", "--http-port", "0", "--device", "cpu"
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(2)]
        http_line = next((line for line in lines if line.startswith("http: ")), "")
        assert http_line, "".join(lines) + (process.stderr.read() if process.poll() else "")
        url = http_line.split()[1].rstrip("/")
        code, answer = call(url, "/v1/search", {"query": {"text": "a blue square"}, "topK": 2})
        assert code == 200 and len(answer["hits"]) == 2
        assert call(url, "/")[0] == 200
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.strip().endswith("stopped") and "Traceback" not in err


def test_a_warning_travels_with_the_answer_and_prints_as_a_line():
    warning = "concept '+3' in require is below the precision floor 0.30 (held-out precision 0.007)"
    result = SearchResult(Granularity.OBJECT, 24, "requested", [], warnings=[warning])
    back = responses.search_result(responses.search_response(result))
    assert back.warnings == [warning]
    assert f"warning      {warning}" in format_result(back, [], explain=False).splitlines()
