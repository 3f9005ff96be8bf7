"""`strata demo`: the main job (service/cli/demo.py) and its report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.demo_config import DemoConfig
from service.cli.search import format_result
from service.results import concept_text
from training.cli import format_summary
from training.core.settings import load_settings

if TYPE_CHECKING:
    from service.cli.demo import DemoPlan, DemoResult

DEMO = DemoConfig()


def demo(
    out: Annotated[
        Path | None, typer.Option(help="folder for every stage's output (default: runs/demo)")
    ] = None,
    scenes: Annotated[
        int, typer.Option(help="compositional scenes, when Flickr8k is absent", min=100)
    ] = DEMO.scenes,
    grasp_epochs: Annotated[int, typer.Option(help="GraSP-VL epochs", min=1)] = DEMO.grasp_epochs,
    grasp_rows: Annotated[
        int, typer.Option(help="rows of the sample GraSP-VL trains on", min=100)
    ] = DEMO.grasp_rows,
    cedar_epochs: Annotated[int, typer.Option(help="CEDAR epochs", min=1)] = DEMO.cedar_epochs,
    k: Annotated[
        int, typer.Option("--top-k", "-k", help="hits per example search", min=1)
    ] = DEMO.k,
    seed: Annotated[
        int, typer.Option(help="seed of every stage that draws (corpus, training, index)", min=0)
    ] = DEMO.seed,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
) -> None:
    """The main job on the embedded default: embed real captions with MiniLM, train GraSP-VL
    and CEDAR, build the index bundle, serve it, and search at every granularity."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    from service.cli.demo import plan_demo, run_demo

    config = DemoConfig(
        scenes=scenes,
        grasp_epochs=grasp_epochs,
        grasp_rows=grasp_rows,
        cedar_epochs=cedar_epochs,
        k=k,
        seed=seed,
        progress=progress,
    )
    settings = load_settings()
    typer.echo(format_plan(plan_demo(settings, config, out)), err=True)
    with logging_redirect_tqdm():
        result = run_demo(settings, config, out=out)
    typer.echo(format_demo(result))


def format_plan(plan: DemoPlan) -> str:
    """The first screen: each stage ahead and about how long it takes (reused ones say so)."""
    lines = [
        f"strata demo: {plan.corpus} ({plan.rows:,} rows) into {plan.root}; estimated on two"
        " CPU cores (fewer with more cores or a GPU):"
    ]
    for stage, seconds in plan.stages.items():
        lines.append(f"  {stage:<9} {'reused' if seconds is None else _duration(seconds)}")
    lines.append(f"  {'total':<9} {_duration(plan.seconds)}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"~{minutes} min {rest:02d} s" if minutes else f"~{rest} s"


def format_demo(result: DemoResult) -> str:
    """The demo's report: stages, then each example search as `strata search --explain` prints
    it, then the best caption hit explained prefix by prefix."""
    lines = [f"corpus       {result.corpus}", format_summary(result.summary)]
    lines += [f"{stage:<12} {what}" for stage, what in result.stages.items()]
    lines.append(f"bundle       {result.bundle}")
    lines.append(f"server       {result.target} (stopped after the searches)")
    for example in result.searches:
        search = example.search
        lines.append(f"\n=== {search.label}: {search.text!r}")
        if search.exclude:
            lines.append(f"exclude      {', '.join(search.exclude)}")
        if example.skipped:
            lines.append(f"note         {example.skipped}: searched without the filter")
        lines.append(format_result(example.result, ["caption"], explain=True))
    why = result.explanation
    if why is not None:
        lines.append(f"\n=== why {why.item_id} matches {result.explained_query!r}")
        lines.append(
            "cosine by prefix: "
            + ", ".join(
                f"{s.granularity.value} ({s.prefix_length}) {s.cosine:.3f}"
                for s in why.similarities
            )
        )
        shared = ", ".join(
            f"{concept_text(c.name, c.label, c.zero_shot)} {c.contribution:.3f}"
            for c in why.shared_concepts[:6]
        )
        lines.append(f"shared concepts (contribution): {shared or 'none'}")
    return "\n".join(lines)
