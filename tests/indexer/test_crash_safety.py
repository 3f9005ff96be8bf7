"""Crash safety: `strata index build` killed (SIGKILL) at each named stage, in child processes.

Whatever the stage, the previous version stays CURRENT and searchable, no half-written version
is visible (every non-hidden version folder has a manifest and verifies), and the next build
succeeds, removes what the killed one left, and takes the next number. (One runner process
forks every command line of this module, so its batch also carries a clean build, a verify and
a refusal, checked as a shell sees them.)
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from bundle_inputs import Inputs, assert_one_line_error, run_strata_batch

from indexer.bundle import Bundle, read_current
from indexer.crashpoints import ENVIRONMENT, STAGES
from indexer.verify import verify_bundle
from indexer.versions import BundleStore

pytestmark = pytest.mark.slow
PUBLISHED = ("after-pointer-switch",)  # stages at which the new version is already CURRENT
RENAMED = ("before-pointer-switch", "after-pointer-switch")  # its folder has its final name


@pytest.fixture(scope="module")
def processes(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory):
    """One bundle directory per stage, each holding v000001, and a build killed at that stage;
    then a clean build, its verify, and a build refused for a bad input."""
    root = tmp_path_factory.mktemp("crash")
    base = root / "base"
    inputs.build(base)
    jobs, folders = [], {}
    for stage in STAGES:
        folders[stage] = root / stage
        shutil.copytree(base, folders[stage])
        jobs.append((inputs.args(folders[stage], "--keep", "1"), {ENVIRONMENT: stage}))
    clean = root / "clean"
    jobs += [
        (inputs.args(clean), {}),
        (["index", "verify", str(clean)], {}),
        (inputs.args(root / "refused", "--cedar", str(inputs.grasp)), {}),
    ]
    runs = run_strata_batch(jobs, root / "runs")
    killed = {stage: (run, folders[stage]) for stage, run in zip(STAGES, runs, strict=False)}
    return killed, runs[len(STAGES) :]


def visible_versions(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("v"))


@pytest.mark.parametrize("stage", STAGES)
def test_a_killed_build_leaves_a_whole_published_version(stage, processes, inputs: Inputs):
    run, out = processes[0][stage]
    assert run.returncode == -signal.SIGKILL, run.stderr
    expected = "v000002" if stage in PUBLISHED else "v000001"
    assert read_current(out) == expected
    # nothing half-written is visible: every version folder is whole and verifies
    visible = visible_versions(out)
    assert visible == (["v000001", "v000002"] if stage in RENAMED else ["v000001"])
    for name in visible:
        assert verify_bundle(out / name, sample=8).faults == []
    bundle = Bundle.open(out).load()
    x = inputs.embeddings()[:2]
    assert bundle.search(x, "object", 1)[1][:, 0].tolist() == [0, 1]
    # what the killed build left is hidden, and the next build removes it
    leftovers = BundleStore(out).leftovers()
    assert bool(leftovers) == (stage not in RENAMED)
    if stage == "after-postings":  # killed mid-way: files written, no manifest yet
        (staged,) = leftovers
        assert (staged / "postings_rows.npy").is_file() and not (staged / "manifest.json").exists()
    summary = inputs.build(out, keep=1)
    assert summary.name == ("v000003" if stage in RENAMED else "v000002")
    assert sorted(p.name for p in summary.cleaned) == sorted(p.name for p in leftovers)
    assert BundleStore(out).leftovers() == []
    assert visible_versions(out) == [summary.name]
    assert read_current(out) == summary.name
    # the loaded previous version still serves, though retention has deleted its folder
    np.testing.assert_array_equal(
        Bundle.open(out).search(x, "full", 3)[1], bundle.search(x, "full", 3)[1]
    )


def test_a_clean_build_verify_and_refusal_as_separate_processes(processes):
    build, verify, refused = processes[1]
    assert build.returncode == 0 and build.stdout.startswith("bundle "), build.stderr
    assert verify.returncode == 0
    assert verify.stdout.rstrip().endswith("ok (64 rows checked against the cache)")
    assert_one_line_error(refused, "is a 'grasp-vl' artifact, not a CEDAR one")
    assert refused.stdout == "" and len(refused.stderr.strip().splitlines()) == 1
