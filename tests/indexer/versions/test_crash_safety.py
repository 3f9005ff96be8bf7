"""Crash safety: `strata index build` killed (SIGKILL) at each named stage, in child processes.

Whatever the stage, the previous version stays CURRENT and searchable, no half-written version
is visible (every non-hidden version folder has a manifest and verifies), and the next build
succeeds, removes what the killed one left, and takes the next number. (One runner process
forks every command line of this module, so its batch also carries a clean build, a verify and
a refusal, checked as a shell sees them.) `strata index add` and `delete` go through the same
stages and are killed at some of them too: the same guarantees, and a rerun of the killed
command either completes or — once the version was published — is refused as already done.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from bundle_inputs import DIM, Inputs, assert_one_line_error, run_strata_batch, write_cache

from indexer.format.bundle import Bundle
from indexer.format.manifest import read_current
from indexer.update.row_changes import UpdateError
from indexer.update.rows import AddConfig, DeleteConfig, add_rows, delete_rows
from indexer.verify.check import verify_bundle
from indexer.versions.bundle_store import BundleStore
from indexer.versions.crashpoints import ENVIRONMENT, STAGES
from training.synthetic import cluster_centres, clustered_rows

pytestmark = pytest.mark.slow
PUBLISHED = ("after-pointer-switch",)  # stages at which the new version is already CURRENT
RENAMED = ("before-pointer-switch", "after-pointer-switch")  # its folder has its final name


@pytest.fixture(scope="module")
def batch(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory):
    """Every command line of this module, run in one batch (one runner start-up): a build
    killed at each stage, a clean build, its verify, a refused build; then an add or a delete
    killed at each of UPDATE_STAGES. Each killed job has its own copy of a directory holding
    v000001. Returns the root, the runs and the cache the adds take."""
    root = tmp_path_factory.mktemp("crash")
    base = root / "base"
    inputs.build(base)
    extra = extra_cache(root / "extra")
    jobs = []
    for stage in STAGES:
        shutil.copytree(base, root / stage)
        jobs.append((inputs.args(root / stage, "--keep", "1"), {ENVIRONMENT: stage}))
    clean = root / "clean"
    jobs += [
        (inputs.args(clean), {}),
        (["index", "verify", str(clean)], {}),
        (inputs.args(root / "refused", "--cedar", str(inputs.grasp)), {}),
    ]
    for operation, stage in UPDATE_STAGES:
        out = root / f"{operation}-{stage}"
        shutil.copytree(base, out)
        jobs.append((update_args(operation, out, extra), {ENVIRONMENT: stage}))
    return root, run_strata_batch(jobs, root / "runs"), extra


@pytest.fixture(scope="module")
def processes(batch):
    """The killed builds by stage (run, bundle directory); the clean build, verify, refusal."""
    root, runs, _ = batch
    killed = {stage: (run, root / stage) for stage, run in zip(STAGES, runs, strict=False)}
    return killed, runs[len(STAGES) : len(STAGES) + 3]


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


UPDATE_STAGES = [
    ("add", "after-first-shard"),
    ("add", "after-postings"),
    ("add", "before-pointer-switch"),
    ("add", "after-pointer-switch"),
    ("delete", "after-prefix-index"),
    ("delete", "before-rename"),
    ("delete", "after-pointer-switch"),
]
EXTRA_ROWS = 80  # two shards of 40
DELETED = ("row-3", "row-400")


def update_args(operation: str, out: Path, extra: Path) -> list[str]:
    if operation == "add":
        return ["index", "add", "--bundles", str(out), "--cache", str(extra), "--no-progress"]
    return ["index", "delete", "--bundles", str(out), *(f"--id={i}" for i in DELETED)]


def rerun(operation: str, out: Path, extra: Path):
    if operation == "add":
        return add_rows(
            AddConfig(bundles=out, cache=extra, keep=1, progress=False, verify_sample=8)
        )
    return delete_rows(DeleteConfig(bundles=out, ids=DELETED, keep=1, verify_sample=8))


def extra_cache(root: Path) -> Path:
    """EXTRA_ROWS new rows (ids extra-…) in two shards, for the adds."""
    centres = cluster_centres(8, DIM, 0)
    shards = [clustered_rows(centres, EXTRA_ROWS // 2, seed=70 + i)[0] for i in range(2)]
    ids = [[f"extra-{i}-{j}" for j in range(EXTRA_ROWS // 2)] for i in range(2)]
    return write_cache(root, list(zip(shards, ids, strict=True)))


@pytest.fixture(scope="module")
def updates(batch):
    """The killed adds and deletes by (operation, stage): (run, bundle directory); the cache."""
    root, runs, extra = batch
    killed = runs[len(STAGES) + 3 :]
    folders = [root / f"{operation}-{stage}" for operation, stage in UPDATE_STAGES]
    return dict(zip(UPDATE_STAGES, zip(killed, folders, strict=True), strict=True)), extra


@pytest.mark.parametrize(("operation", "stage"), UPDATE_STAGES)
def test_a_killed_add_or_delete_leaves_a_whole_published_version(operation, stage, updates):
    killed, extra = updates
    run, out = killed[(operation, stage)]
    assert run.returncode == -signal.SIGKILL, run.stderr
    published = stage in PUBLISHED
    assert read_current(out) == ("v000002" if published else "v000001")
    visible = visible_versions(out)
    assert visible == (["v000001", "v000002"] if stage in RENAMED else ["v000001"])
    for name in visible:
        assert verify_bundle(out / name, sample=8).faults == []
    changed = {"add": 600 + EXTRA_ROWS, "delete": 600 - len(DELETED)}[operation]
    assert Bundle.open(out).rows == (changed if published else 600)
    assert bool(BundleStore(out).leftovers()) == (stage not in RENAMED)
    if published:  # done already: the same command again is refused, nothing changes
        with pytest.raises(UpdateError, match=r"already in v000002|not in v000002"):
            rerun(operation, out, extra)
        return
    summary = rerun(operation, out, extra)
    assert summary.name == ("v000003" if stage in RENAMED else "v000002")
    assert summary.rows == changed and BundleStore(out).leftovers() == []
    assert visible_versions(out) == [summary.name] and read_current(out) == summary.name
