"""How the concepts commands and `strata explain` print: a concept table, one concept's
details, JSON, and an explanation (service/cli/concepts.py runs the commands)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from service.results import ConceptInfo, Explanation, concept_text

TEXT_WIDTH = 48


def concept_table(concepts: Sequence[ConceptInfo], extra: Sequence[str] | None = None) -> str:
    """One line per concept: label, name, score, precision (where the catalog has it), scope,
    frequency, active rows, its top example; `extra` adds a last column (a search's why)."""
    precise = any(precision_of(c) is not None for c in concepts)
    header = ["label", "name", "score", *(["precision"] if precise else [])]
    header += ["scope", "frequency", "rows", "top example"]
    if extra is not None:
        header.append("match")
    rows = []
    for n, concept in enumerate(concepts):
        precision = precision_of(concept)
        row = [concept.label, concept.name, f"{concept.score:.3f}"]
        if precise:
            row.append("–" if precision is None else f"{precision:.2f}")
        row += [
            concept.scope or "–",
            f"{100 * concept.frequency:.2f}%",
            str(concept.active_rows),
            _example(concept.examples[0]) if concept.examples else "–",
        ]
        if extra is not None:
            row.append(extra[n])
        rows.append(row)
    return _table(header, rows)


def concept_details(concept: ConceptInfo) -> str:
    """Everything the catalog says of one concept."""
    precision = precision_of(concept)
    lines = [
        f"{concept.label}  {concept.name}",
        f"  score        {concept.score:.3f} (cosine of the axis with its name's text embedding)"
        if concept.label.startswith(("+", "-"))
        else "  score        –     (a zero-shot concept: no caption taught it; the rows whose "
        "cosine with its text embedding reaches its cut)"
        if concept.zero_shot
        else f"  score        {concept.score:.3f} (a word concept, learnt from captions: its "
        "held-out precision)",
    ]
    if precision is not None:
        lines.append(f"  precision    {precision:.3f} (held out)")
    if not concept.named:
        lines.append("  unnamed      no name reached the precision threshold; found by label only")
    if concept.gallery_agreement is not None:
        lines.append(
            f"  on gallery   agreement {concept.gallery_agreement:.3f} of its activation with its "
            "name's text direction on this bundle's rows (measured at build, without labels)"
        )
    if concept.hidden_on_gallery:
        lines.append(
            f"  hidden here  not shown in explanations or listings on this gallery: "
            f"{concept.hidden_on_gallery}; a filter on it warns"
        )
    elif concept.below_floor:
        lines.append(
            "  below floor  not shown in explanations or listings (its held-out precision is "
            "below the catalog's floor); a filter on it warns"
        )
    lines += [
        f"  scope        {concept.scope or 'not measured (strata eval cds --artifact)'}",
        f"  frequency    {100 * concept.frequency:.2f}% of training rows",
        f"  active rows  {concept.active_rows} in this bundle (what --require allows)",
    ]
    if concept.runner_ups:
        runner_ups = ", ".join(f"{w} {s:.3f}" for w, s in concept.runner_ups)
        lines.append(f"  runner-ups   {runner_ups}")
    if concept.examples:
        lines.append("  top examples (activation, id, text)")
        lines += [
            f"    {e.get('activation', 0.0):6.3f}  {e.get('id', '')}  {_cut(e.get('text', ''))}"
            for e in concept.examples
        ]
    return "\n".join(lines)


def precision_of(concept: ConceptInfo) -> float | None:
    """The held-out precision of a concept's name, where the catalog records one."""
    return concept.precision


def _example(example: dict[str, Any]) -> str:
    return _cut(str(example.get("text") or example.get("id", "")))


def _cut(text: str, most: int = TEXT_WIDTH) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def concepts_json(concepts: Sequence[ConceptInfo]) -> str:
    return json.dumps([asdict(c) for c in concepts], indent=2, default=str)


def format_explanation(why: Explanation, most: int = 10) -> str:
    """The item, its description where the server gives one, the cosine at each prefix, then
    the shared concepts by contribution and both sides' active concepts."""
    lines = [f"item         {why.item_id} (row {why.row}, bundle version {why.bundle_version})"]
    for side, description in (("query", why.query_description), ("item", why.item_description)):
        if description is None:
            continue
        lines.append(f"{side + ' reads':<12} {description.phrase or '(no named concept)'}")
        lines += [f"{'':<12} ~ {c.text} ({c.cosine:.3f})" for c in description.captions]
    lines += ["", "cosine by prefix"]
    lines.append(
        _table(
            ["granularity", "prefix", "cosine"],
            [
                [s.granularity.value, str(s.prefix_length), f"{s.cosine:.3f}"]
                for s in why.similarities
            ],
        )
    )
    shared = why.shared_concepts[:most] if most else why.shared_concepts
    lines += [
        "",
        f"shared concepts ({len(why.shared_concepts)}; contribution = query × item, summed "
        "over the concepts of one name)",
    ]
    if shared:
        lines.append(
            _table(
                ["label", "name", "scope", "query", "item", "contribution"],
                [
                    [
                        c.label,
                        f"{c.name} (zero-shot)" if c.zero_shot else c.name,
                        c.scope or "–",
                        f"{c.query_activation:.3f}",
                        f"{c.item_activation:.3f}",
                        f"{c.contribution:.3f}",
                    ]
                    for c in shared
                ],
            )
        )
        if len(shared) < len(why.shared_concepts):
            lines.append(f"… {len(why.shared_concepts) - len(shared)} more (--concepts 0: all)")
    else:
        lines.append("none: query and item have no active concept in common")
    lines.append("")
    for side, active in (("query", why.query_concepts), ("item", why.item_concepts)):
        strongest = sorted(active, key=lambda c: -c.activation)
        names = ", ".join(
            f"{concept_text(c.name, c.label, c.zero_shot)} {c.activation:.3f}"
            for c in strongest[:8]
        )
        more = f", … {len(strongest) - 8} more" if len(strongest) > 8 else ""
        lines.append(f"{side + ' concepts':<15}{names}{more}")
    return "\n".join(lines)
