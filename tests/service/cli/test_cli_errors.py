"""Start-up and errors of the `strata` command, as a user meets them (real subprocesses).

The light paths (`import service.cli`, `--help`, the client side of `strata search`) load no torch,
FAISS, POT or scikit-learn; every bad input of tests/robustness/cli_errors.py is one
line `strata: error: …` with its exit code, no traceback; a busy port is refused at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.robustness.cli_errors import (
    Outcome,
    cache_without_encoder,
    error_cases,
    listening_socket,
    run_case,
)

HEAVY = ("torch", "faiss", "ot", "sklearn")

LOADED = """
import json, sys
sys.argv = ["strata", *json.loads(sys.argv[1])]
from service.cli import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)), file=sys.stderr)
"""


def heavy_modules_after(*args: str) -> list[str]:
    """The heavy libraries loaded by `strata ARGS` (run through service.cli.main)."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED.format(heavy=HEAVY), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--help",),
        ("--version",),
        ("train", "--help"),
        ("eval", "--help"),
        ("embed", "info", "--help"),
        ("search", "--help"),
        ("serve", "--help"),
        ("search", "a dog", "--target", "127.0.0.1:9", "--timeout", "1"),  # the client path
    ],
)
def test_light_paths_load_no_heavy_library(args):
    assert heavy_modules_after(*args) == []


def test_import_service_cli_is_light():
    code = f"import sys, service.cli; print([m for m in {HEAVY!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_every_lazy_command_loads_with_examples():
    """Each lazily listed command resolves, and every command's help carries examples."""
    import typer

    from service.cli import app

    root = typer.main.get_command(app)

    def walk(command, path):
        if hasattr(command, "commands"):
            for name in list(command.commands):
                yield from walk(command.commands[name], (*path, name))
        else:
            yield path, command

    leaves = list(walk(root, ()))
    assert len(leaves) > 20
    missing = [
        " ".join(path) for path, command in leaves if "Examples:" not in (command.epilog or "")
    ]
    assert missing == []


def test_version(strata):
    done = strata("--version", check=True)
    assert done.stdout.startswith("strata ")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, text_bundle: Path) -> list[Outcome]:
    work = tmp_path_factory.mktemp("cli-errors")
    cache = cache_without_encoder(work / "no-encoder")
    with listening_socket() as busy:
        cases = error_cases(work, text_bundle, busy.getsockname()[1], cache)
        return [run_case(case) for case in cases]


def test_every_bad_input_is_one_line(outcomes: list[Outcome]):
    bad = [(o.case.what, o.code, o.stderr) for o in outcomes if not o.ok]
    assert bad == []


def test_busy_port_is_refused_before_models_load(outcomes: list[Outcome], text_bundle: Path):
    busy = next(o for o in outcomes if o.case.what == "serve: busy port")
    assert busy.ok
    assert "grpc" not in busy.stderr.lower().replace("--", "")  # no core log line leaked
    with listening_socket() as taken:
        port = str(taken.getsockname()[1])
        serve = ("serve", "--bundles", str(text_bundle), "--port", port, "--device", "cpu")
        assert "torch" not in heavy_modules_after(*serve)  # refused before the encoder loads


def test_train_cedar_without_encoder_fails_before_training(outcomes, tmp_path_factory):
    case = next(o for o in outcomes if o.case.what == "train cedar: cache without encoder")
    assert case.ok
    out = Path(case.case.args[case.case.args.index("--out") + 1])
    assert not out.exists() and not Path(f"{out}.work").exists()
