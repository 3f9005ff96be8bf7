"""`strata train cosae` / `strata eval cosae`: one-line errors, the report, resuming."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from training.core.errors import InputError
from training.cosae import cli, evaluate
from training.cosae.model import load_cosae

TINY = [
    "--rows",
    "600",
    "--steps",
    "30",
    "--concepts",
    "16",
    "--sparsity",
    "2",
    "--no-progress",
    "--device",
    "cpu",
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    """The two commands as `training.cli` registers them."""
    commands = typer.Typer(pretty_exceptions_enable=False)
    commands.command("train")(cli.train_command)
    commands.command("eval")(cli.eval_command)
    return commands


def one_line_error(app: typer.Typer, args: list[str]) -> str:
    """The InputError the command raised (the strata entry point prints it as one line)."""
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, InputError), result.output
    message = str(result.exception)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("fraction", ["0", "1.5", "-0.01"])
def test_train_refuses_a_paired_fraction_outside_0_1(app, tmp_path: Path, fraction: str):
    message = one_line_error(
        app, ["train", "-o", str(tmp_path / "a"), "--paired-fraction", fraction]
    )
    assert "(0, 1]" in message and f"got {float(fraction)!r}" in message
    assert not (tmp_path / "a").exists()


def test_eval_refuses_bad_fractions_methods_pairs_and_configs(app, tmp_path: Path):
    out = str(tmp_path / "e")
    assert "(0, 1]" in one_line_error(app, ["eval", "-o", out, "--fractions", "0.1,2"])
    assert "comma list" in one_line_error(app, ["eval", "-o", out, "--fractions", "a,b"])
    assert "foo" in one_line_error(app, ["eval", "-o", out, "--methods", "cosae,foo"])
    assert "unknown pair" in one_line_error(app, ["eval", "-o", out, "--pair", "nonsense"])
    message = one_line_error(app, ["eval", "-o", out, "--concepts", "4", "--sparsity", "8"])
    assert "exceeds n_concepts" in message
    message = one_line_error(app, ["eval", "-o", out, "--distribution", "gaussian"])
    assert message.startswith("CosaeConfig: distribution")


def test_train_writes_a_loadable_artifact_with_its_test_metrics(app, tmp_path: Path):
    out = tmp_path / "artifact"
    result = CliRunner().invoke(app, ["train", "-o", str(out), "--paired-fraction", "0.1", *TINY])
    assert result.exit_code == 0, result.output
    model, manifest = load_cosae(out)
    assert manifest["paired"]["pairs"] == math.ceil(0.1 * manifest["split"]["train"])
    assert set(manifest["metrics"]["test"]) >= {"fvu_i", "translation_fvu_ij", "f1", "recovery"}
    assert model.n_concepts == 16 and model.domain_i.k == 2
    assert "pairs known" in result.output
    again = CliRunner().invoke(app, ["train", "-o", str(out), *TINY])
    assert isinstance(again.exception, InputError) and "--overwrite" in str(again.exception)


def test_the_seed_decides_the_weights_file(app, tmp_path: Path):
    """--seed reaches the config, the split, the synthetic pair and the training draws."""

    def digest(seed: str, run: str) -> str:
        out = tmp_path / run
        result = CliRunner().invoke(app, ["train", "-o", str(out), "--seed", seed, *TINY])
        assert result.exit_code == 0, result.output
        assert load_cosae(out)[1]["config"]["seed"] == int(seed)
        return hashlib.sha256((out / "weights.safetensors").read_bytes()).hexdigest()

    first = digest("3", "a")
    assert digest("3", "b") == first
    assert digest("4", "c") != first


def test_eval_reports_every_method_at_every_fraction_and_reuses_finished_rows(
    app, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    out = tmp_path / "report"
    args = ["eval", "-o", str(out), "--fractions", "0.01,1", *TINY]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    rows = {(r["fraction"], r["method"]) for r in report["results"]}
    assert rows == {(f, m) for f in (0.01, 1.0) for m in evaluate.METHODS}
    procrustes = next(r for r in report["results"] if r["method"] == "procrustes")
    assert procrustes["fvu_i"] is None and procrustes["translation_fvu_ij"] is not None
    table = (out / "report.md").read_text()
    assert table.count("| 0.01 |") == len(evaluate.METHODS) and "R@1 i→j" in table
    assert (out / "metrics.png").stat().st_size > 10_000

    def refit(*_args, **_kwargs):
        raise AssertionError("a finished result was fitted again")

    monkeypatch.setattr(evaluate, "fit_method", refit)
    rerun = CliRunner().invoke(app, args)
    assert rerun.exit_code == 0, rerun.output
    assert json.loads((out / "report.json").read_text())["results"] == report["results"]
