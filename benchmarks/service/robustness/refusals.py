"""The refusal table: every damage of `benchmarks.indexer.tamper` (a flipped byte in each kind
of bundle file, truncated files, manifests edited to match a tampered file, a partly written
version) × every path a version takes to users — `strata index publish`, a hot swap from a
Redis announcement, AdminService.Reload, `strata serve` start-up — and what each did.

A small bundle (MiniLM in its manifest, synthetic rows) is built once; each damage is done to
a copy of its version under a new version number. Publish and start-up run the real command
line in a subprocess; hot swap and Reload go to one live server (in this process, serving the
intact v000001, following a Redis of its own key prefix), which must still serve v000001 after
every refusal. Needs Redis (STRATA_REDIS_URL, default redis://127.0.0.1:6379/0).

    python -m benchmarks.service.robustness.refusals
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import redis

from benchmarks.harness import publish
from benchmarks.indexer.tamper import damages, edit_manifest
from benchmarks.service.load import build_gallery
from indexer.format.bundle import Bundle
from indexer.format.manifest import CURRENT, MANIFEST, version_name
from indexer.versions.publish import ChannelKeys
from service._generated.strata.v1 import admin_pb2 as apb
from service._generated.strata.v1 import admin_pb2_grpc
from service.api.background import BackgroundServer
from service.api.server import ServerConfig
from service.engine.search import SearchEngine
from service.serving.hot_swap import HotSwapper
from training.core.files import sha256_file
from training.core.redis_connection import redis_connection

TOKEN = "refusal-table"
PATHS = ("publish", "hot swap", "Reload", "start-up")


def strata(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_LOG_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "service", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def last_line(run: subprocess.CompletedProcess[str]) -> str:
    lines = (run.stderr or run.stdout).strip().splitlines()
    return lines[-1] if lines else ""


def copy_as(base: Path, root: Path, version: int) -> Path:
    """`base` copied into `root` as version `version` (its manifest renumbered to match)."""
    path = Path(shutil.copytree(base, root / version_name(version)))
    edit_manifest(path, lambda m: m.update(version=version, name=version_name(version)))
    return path


def cli_outcome(run: subprocess.CompletedProcess[str], ok: str) -> str:
    if run.returncode == 0:
        return ok
    traceback = " (TRACEBACK)" if "Traceback" in run.stderr else ""
    return f"exit {run.returncode}{traceback}: {last_line(run).removeprefix('strata: error: ')}"


def start_up(bundles: Path, timeout: float = 120) -> str:
    """`strata serve` on a directory: refused (its line), or served (stopped by SIGTERM)."""
    env = {**os.environ, "STRATA_LOG_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--bundles", str(bundles), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # "serving ..." or nothing (it exits)
    if line.startswith("serving"):
        process.terminate()
        process.communicate(timeout=timeout)
        return "served"
    _, err = process.communicate(timeout=timeout)
    run = subprocess.CompletedProcess(process.args, process.returncode, line, err)
    return cli_outcome(run, "served")


def announce(client: redis.Redis, prefix: str, path: Path, version: int) -> None:
    """What a publisher announces for a version (published as it is, unverified)."""
    manifest = path / MANIFEST
    record = {
        "version": version,
        "name": version_name(version),
        "path": str(path),
        "bundles": str(path.parent),
        "manifest_sha256": sha256_file(manifest) if manifest.is_file() else None,
    }
    client.publish(ChannelKeys(prefix).channel, json.dumps(record))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument(
        "--redis-url", default=os.environ.get("STRATA_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--json", type=Path, default=Path("runs/bench/refusals.json"))
    args = parser.parse_args(argv)
    prefix = f"strata-refusals-{uuid.uuid4().hex[:8]}"
    client = redis_connection(args.redis_url, 5.0)
    table: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="strata-refusals-") as folder:
        work = Path(folder)
        bundles = build_gallery(work / "gallery", args.rows)
        base = Bundle.open(bundles).path
        names = ["intact", *damages(base)]
        versions: dict[str, Path] = {}
        for number, name in enumerate(names, start=2):
            path = copy_as(base, bundles, number)
            if name != "intact":
                damages(path)[name](path)
            versions[name] = path
        engine = SearchEngine(Bundle.open_version(base), None)
        config = ServerConfig(port=0, admin_token=TOKEN)
        with BackgroundServer(engine, config) as server:
            swapper = HotSwapper(server.server, args.redis_url, prefix, backoff_s=0.1, poll_s=60)
            swapper.start(server.loop)
            channel = grpc.insecure_channel(server.target)
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            auth = (("authorization", f"Bearer {TOKEN}"),)
            try:
                deadline = time.monotonic() + 10
                while not swapper.connected and time.monotonic() < deadline:
                    time.sleep(0.05)
                for name in names:
                    path, number = versions[name], int(versions[name].name[1:])
                    row: dict[str, str] = {}
                    # Reload first (the server is on v000001; an intact version swaps in, and
                    # we reload back to v000001 so the hot swap sees a newer version again)
                    try:
                        reply = admin.Reload(
                            apb.ReloadRequest(version=path.name), metadata=auth, timeout=120
                        )
                        row["Reload"] = f"OK: serves {reply.bundle_name}"
                        admin.Reload(
                            apb.ReloadRequest(version=base.name), metadata=auth, timeout=120
                        )
                    except grpc.RpcError as exc:
                        row["Reload"] = f"{exc.code().name}: {exc.details()}"
                    before = (swapper.counts.swaps, swapper.counts.failures)
                    announce(client, prefix, path, number)
                    deadline = time.monotonic() + 120
                    while (swapper.counts.swaps, swapper.counts.failures) == before:
                        assert time.monotonic() < deadline, f"no swap outcome for {name}"
                        time.sleep(0.02)
                    event = swapper.counts.events[-1]
                    served = server.server.served.engine.bundle.name
                    if event.result == "ok":
                        row["hot swap"] = f"swapped: serves {served}"
                        admin.Reload(
                            apb.ReloadRequest(version=base.name), metadata=auth, timeout=120
                        )
                    else:
                        row["hot swap"] = f"refused, still serves {served}: {event.error}"
                    run = strata("index", "publish", str(bundles), "--version", path.name)
                    row["publish"] = cli_outcome(run, f"published {path.name}")
                    if run.returncode == 0:  # put CURRENT back on the intact base
                        (bundles / CURRENT).write_text(f"{base.name}\n")
                    alone = work / "startup" / name.replace(" ", "_").replace(":", "")
                    alone.mkdir(parents=True)
                    shutil.copytree(path, alone / path.name)
                    (alone / CURRENT).write_text(f"{path.name}\n")
                    row["start-up"] = start_up(alone)
                    table[name] = row
                    print(f"{name:<45} " + " | ".join(row[p][:60] for p in PATHS), flush=True)
            finally:
                swapper.close()
                channel.close()
            registry = server.server.metrics.registry
            refused = {
                sample.labels["reason"]: sample.value
                for family in registry.collect()
                if family.name == "strata_bundle_refused"
                for sample in family.samples
                if sample.name == "strata_bundle_refused_total" and sample.value
            }
    keys = list(client.scan_iter(f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    result = {
        "benchmark": "refusals",
        "rows": args.rows,
        "paths": list(PATHS),
        "table": table,
        "strata_bundle_refused_total": refused,
        "every_damage_refused_on_every_path": all(
            not row[p].startswith(("OK", "swapped", "published", "served"))
            for name, row in table.items()
            if name != "intact"
            for p in PATHS
        ),
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
