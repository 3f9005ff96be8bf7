"""The lines `strata index build | add | delete` print: what a new version holds, how it was
made, its files and what publishing it did."""

from __future__ import annotations

from pathlib import Path

from indexer.build.full import BuildSummary
from indexer.format.index_plan import format_bytes
from indexer.update.rows import UpdateSummary


def file_lines(files: dict[str, int]) -> list[str]:
    """A summary's files, each with its size, and their total."""
    width = max(len(name) for name in files)
    lines = ["files"]
    lines += [
        f"  {name:<{width}}  {format_bytes(size):>10}" for name, size in sorted(files.items())
    ]
    lines.append(f"on disk      {format_bytes(sum(files.values()))}")
    return lines


def format_build_summary(summary: BuildSummary) -> str:
    lines = [
        f"bundle       {summary.path} (now CURRENT)",
        f"rows         {summary.rows} from {summary.shards} shards"
        + (f", {summary.training_rows} sampled for training" if summary.training_rows else ""),
        "indexes      "
        + ", ".join(
            f"{p.length}: {p.factory}{' (on disk)' if p.ondisk else ''}" for p in summary.prefixes
        ),
        f"time         {summary.seconds:.1f} s, {summary.rows_per_second:.0f} rows/s"
        + (f" (shards on {summary.engine})" if summary.engine != "local" else ""),
        vocabulary_line(summary.vocabulary),
        *file_lines(summary.files),
    ]
    tuned = [p for p in summary.prefixes if p.tuning is not None and p.tuning.status != "untuned"]
    if tuned:
        lines.insert(
            4,
            "tuned        "
            + ", ".join(
                f"{p.length}: {p.search} recall@{p.tuning.k} {p.tuning.recall:.3f}"
                f" {p.tuning.latency_ms:.2f} ms"
                for p in tuned
                if p.tuning is not None
            ),
        )
    lines += tail_lines(summary.announced, summary.removed_versions, summary.cleaned)
    return "\n".join(lines)


def vocabulary_line(record: dict | None) -> str:
    """What the version keeps for the open vocabulary (indexer/vocabulary/stored_state.py)."""
    if record is None:
        return (
            "vocabulary   no state kept (the CEDAR artifact keeps no words' text directions): "
            "the service measures it at the first phrase"
        )
    sketch = ", a sketch" if record.get("sketch") else ""
    gate = record.get("gate")
    gated = (
        f"; learnt words gated at μ + {gate['z']:g}σ, {gate['entries_removed']:,} rows dropped "
        f"from their postings"
        if gate
        else ""
    )
    return (
        f"vocabulary   zero-shot state measured in {record['seconds']:.1f} s "
        f"(z {record['z']:.2f}, {record['hub_words']} hub words{sketch}){gated}"
    )


def tail_lines(announced: str | None, removed: list[str], cleaned: list[Path]) -> list[str]:
    lines = []
    if announced:
        lines.append(f"announced    {announced}")
    if removed:
        lines.append(f"removed      {', '.join(removed)} (--keep)")
    if cleaned:
        lines.append(f"cleaned      {len(cleaned)} leftovers of killed jobs")
    return lines


def format_update_summary(summary: UpdateSummary, source: str | None = None) -> str:
    if summary.operation == "add":
        change = f"{summary.base_rows} + {summary.changed_rows} added from {source}"
    else:
        change = f"{summary.base_rows} − {summary.changed_rows} deleted"
    lines = [
        f"bundle       {summary.path} (now CURRENT; made from {summary.base})",
        f"rows         {summary.rows} = {change}",
    ]
    if summary.missing_ids:
        shown = ", ".join(summary.missing_ids[:5])
        more = f", … ({len(summary.missing_ids)} in all)" if len(summary.missing_ids) > 5 else ""
        lines.append(f"not found    {shown}{more} (--missing-ok)")
    lines.append(f"time         {summary.seconds:.1f} s")
    lines.append("how")
    width = max(len(name) for name in summary.actions)
    lines += [f"  {name:<{width}}  {action}" for name, action in summary.actions.items()]
    lines += file_lines(summary.files)
    lines += [f"note         {note}" for note in summary.notes]
    lines += tail_lines(summary.announced, summary.removed_versions, summary.cleaned)
    return "\n".join(lines)
