"""Every example line of every `--help` runs as written after `strata demo`.

The examples are read from the live command tree (`strata`, every group, every lazy command
loaded), from the "Examples:" block of each help epilog, so a new example is covered without
touching this file. A small `strata demo` runs first, on a tiny Flickr8k-format corpus in a data
folder of the test's own (STRATA_DATA_DIR), so the demo leaves the paths the examples name:
runs/demo/cache-flickr8k-minilm, grasp-flickr8k, cedar-flickr8k, bundles-flickr8k.

Each example runs as a subprocess of the real command line (`python -m service`, what the
`strata` script runs), in one of three ways:

- most run to completion, each help's examples in order in a fresh copy of the demo's working
  folder (an example may use what the demo left or what an earlier example of the same help
  wrote, and no help sees another's changes);
- `strata serve` runs until stopped: each is started, searched through on its port (and its
  HTTP port, when it names one) and stopped with Ctrl-C (SIGINT), which must end it with 0;
- `strata search`, `explain` and `concepts … --target` ask a server: one started here on the
  default target, 127.0.0.1:50051, as `strata serve --bundles runs/demo/bundles-flickr8k`.

The ports the examples name (50051, 50052, 8080) are fixed by their text. Two runs of this module
on one machine take turns (a lock file), and a port held by another program is waited for, then
reported as a failure; nothing is skipped. Redis is the real server at 127.0.0.1:6379, under a
key prefix of this run (STRATA_REDIS_PREFIX, which the commands read), removed afterwards.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from service.cli import app

pytestmark = pytest.mark.slow

REPOSITORY = Path(__file__).resolve().parents[3]
DEMO = ("demo", "--grasp-epochs", "2", "--cedar-epochs", "2", "--no-progress")
BUNDLES = "runs/demo/bundles-flickr8k"
DEFAULT_TARGET = "127.0.0.1:50051"
TIMEOUT_S = 300  # one example at most: catches a hang, far above any example's time here
READY_S = 90.0  # a server's start, model load included, on a busy 2-core machine
PORT_WAIT_S = 60.0  # how long a port the examples name may stay taken by another program

# Examples that need what a test machine cannot give, each with its reason. Every other example
# must run and exit 0; keep this list short (MAX_EXEMPT), and give a new entry a reason as good.
EXEMPT = {
    "strata embed run --corpus coco --path data/coco-mini --encoder open_clip:ViT-B-32 "
    "--out runs/coco": "COCO images and open_clip's ViT-B-32 weights, a download; the demo "
    "leaves neither",
    "strata search --image photo.jpg --target 127.0.0.1:50051": "a photo, and a server whose "
    "bundle was embedded by an image encoder (the demo's MiniLM embeds text only)",
    "strata index export --bundles runs/demo/bundles-flickr8k --to milvus://milvus:19530 "
    "--grace 600": "a Milvus server (the example before it exports to Milvus Lite, a file)",
}
MAX_EXEMPT = 3


@dataclass(frozen=True)
class Example:
    help: str  # the command whose --help shows it: "strata index add"
    line: str  # as printed

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.line)

    @property
    def kind(self) -> str:
        """offline (runs to completion), serve (until stopped) or client (asks a server)."""
        argv = self.argv
        if "--help" in argv:
            return "offline"
        if argv[1] == "serve":
            return "serve"
        if argv[1] in ("search", "explain"):
            return "client"
        if argv[1] == "concepts" and "--bundles" not in argv:
            return "client"
        return "offline"

    def option(self, name: str) -> str | None:
        argv = self.argv
        return argv[argv.index(name) + 1] if name in argv else None


def help_examples() -> list[Example]:
    """Every example line of every help, in the order of the command tree."""
    found: list[Example] = []

    def walk(command, path: list[str]) -> None:
        epilog = command.epilog or ""
        if "Examples:" in epilog:
            block = epilog.split("Examples:", 1)[1]
            for line in block.splitlines():
                if line.strip() and line.strip() != "\b":
                    found.append(Example(" ".join(path), line.strip()))
        if hasattr(command, "commands"):  # a group: its commands, the lazy ones loaded
            context = command.context_class(command, info_name=path[-1])
            for name in command.list_commands(context):
                walk(command.get_command(context, name), [*path, name])

    walk(typer.main.get_command(app), ["strata"])
    return found


# --- a tiny Flickr8k: 100 images, five captions each, ~300 words --------------------------


def words(text: str) -> list[str]:
    return text.split()


SUBJECTS = words(
    "dog puppy cat kitten horse pony cow sheep goat bird duck goose man woman boy girl child "
    "baby skier surfer cyclist climber dancer player runner swimmer biker skater fisherman "
    "farmer chef"
)
COLOURS = words("black white brown red blue green yellow orange purple pink grey tan golden")
ADJECTIVES = words(
    "small large young old happy tired wet muddy fluffy spotted striped curly tall short "
    "skinny furry shaggy smiling"
)
VERBS = words(
    "runs jumps plays sits walks swims climbs rides stands lies sleeps digs chases carries "
    "catches throws kicks pulls pushes holds watches waits dances skates surfs skis rolls "
    "splashes crawls races"
)
PLACES = words(
    "beach grass snow water street park field forest river lake mountain hill road sidewalk "
    "yard garden pool fountain bridge fence wall stairs bench playground sand mud desert "
    "meadow stadium court track trail cliff rock ocean wave pond dock porch alley market"
)
OBJECTS = words(
    "ball stick frisbee toy rope bone kite bicycle skateboard surfboard umbrella hat scarf "
    "jacket backpack bag bucket shovel boat car truck bus train tree flower flag sign box "
    "basket blanket bottle cup book camera guitar drum net bat glove helmet leash collar "
    "sled tire lantern ladder chair table tent wagon hose paddle pillow ribbon whistle "
    "wheel banner puddle feather pebble shell leaf branch log statue tractor canoe kayak"
)
PREPOSITIONS = words("on in through near beside across along under over behind")
# ids the examples name (`strata explain --id`, `strata index delete --id`): real Flickr8k ones
NAMED_IMAGES = ("2059616165_b7c99c1009.jpg", "1000268201_693b08cb0e.jpg")
SPLIT_FILES = {
    "train": "Flickr_8k.trainImages.txt",
    "dev": "Flickr_8k.devImages.txt",
    "test": "Flickr_8k.testImages.txt",
}


def caption(draw: random.Random, subject: str, colour: str) -> str:
    adjective, verb, place = draw.choice(ADJECTIVES), draw.choice(VERBS), draw.choice(PLACES)
    thing, at = draw.choice(OBJECTS), draw.choice(PREPOSITIONS)
    forms = (
        f"A {colour} {subject} {verb} {at} the {place} .",
        f"A {adjective} {subject} with a {thing} {verb} {at} the {place} .",
        f"The {colour} {subject} {verb} .",
        f"A {subject} {verb} a {colour} {thing} {at} the {place} .",
        f"Two {adjective} {subject}s {verb.removesuffix('s')} {at} a {place} .",
    )
    return draw.choice(forms)


def write_flickr8k(folder: Path, images: int = 100, seed: int = 0) -> None:
    """Flickr8k's files (token file, three split files) with made-up captions."""
    draw = random.Random(seed)
    names = list(NAMED_IMAGES)
    while len(names) < images:
        names.append(f"{draw.randrange(10**9, 4 * 10**9)}_{draw.randrange(16**10):010x}.jpg")
    lines = []
    for number, image in enumerate(names):
        subject = "dog" if number % 3 == 0 else SUBJECTS[number % len(SUBJECTS)]
        colour = draw.choice(COLOURS)
        for index in range(5):
            text = "A black dog ." if image == NAMED_IMAGES[0] and index == 0 else None
            lines.append(f"{image}#{index}\t{text or caption(draw, subject, colour)}")
    folder.mkdir(parents=True)
    (folder / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    order = names[2:]
    dev, test = order[:15], [*order[15:30], *NAMED_IMAGES]
    splits = {"train": order[30:], "dev": dev, "test": test}
    for split, filename in SPLIT_FILES.items():
        (folder / filename).write_text("\n".join(splits[split]) + "\n")


# --- running the command line ---------------------------------------------------------------


def command_env(data: Path, redis_prefix: str) -> dict[str, str]:
    """A user's environment: none of the caller's STRATA_* settings (the suite's runs folder
    among them), this checkout's packages first, the test's data folder, the CPU."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("STRATA_")}
    path = env.get("PYTHONPATH")
    env.update(
        PYTHONPATH=str(REPOSITORY) + (os.pathsep + path if path else ""),
        STRATA_DATA_DIR=str(data),
        STRATA_DEVICE="cpu",
        STRATA_LOG_LEVEL="WARNING",
        STRATA_REDIS_PREFIX=redis_prefix,
        HF_HUB_OFFLINE="1",
    )
    return env


def strata_argv(argv: list[str]) -> list[str]:
    assert argv[0] == "strata", argv
    return [sys.executable, "-m", "service", *argv[1:]]


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        strata_argv(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def failure(example: Example, result: subprocess.CompletedProcess[str]) -> str:
    tail = (result.stderr or result.stdout).strip().splitlines()[-8:]
    return f"{example.line}\n  (from `{example.help} --help`, exit {result.returncode})\n    " + (
        "\n    ".join(tail)
    )


@dataclass(frozen=True)
class Outcome:
    example: Example
    seconds: float
    problem: str | None  # what failed, or None


@dataclass
class Demo:
    folder: Path  # the working folder `strata demo` ran in: runs/demo/… below it
    env: dict[str, str]
    seconds: float


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    return help_examples()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    root = tmp_path_factory.mktemp("help-examples")
    write_flickr8k(root / "data" / "flickr8k")
    prefix = f"strata-help-examples-{uuid.uuid4().hex[:8]}"
    env = command_env(root / "data", prefix)
    folder = root / "demo"
    folder.mkdir()
    started = time.monotonic()
    result = run(["strata", *DEMO], folder, env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (folder / BUNDLES / "CURRENT").is_file()
    try:
        yield Demo(folder, env, time.monotonic() - started)
    finally:
        remove_redis_keys(prefix)


def remove_redis_keys(prefix: str) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=0)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(scope="module")
def ports() -> Iterator[None]:
    """The examples' ports are fixed: two runs of this module on one machine take turns."""
    with (Path(tempfile.gettempdir()) / "strata-help-examples.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def wait_port_free(port: int) -> None:
    """Until 127.0.0.1:`port` can be listened on (a server of an earlier step may still be
    closing it); a program that keeps it fails the test, naming the port."""
    deadline = time.monotonic() + PORT_WAIT_S
    while True:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
                return
            except OSError:
                pass
        assert time.monotonic() < deadline, (
            f"127.0.0.1:{port} stayed taken by another program for {PORT_WAIT_S:.0f} s; the "
            "help examples name this port: stop what listens there and rerun"
        )
        time.sleep(0.5)


@contextmanager
def serving(argv: list[str], demo: Demo, log: Path) -> Iterator[subprocess.Popen]:
    """`strata serve …` started in the demo's folder; stopped with Ctrl-C (SIGINT) on exit,
    which must end it with exit code 0."""
    with log.open("w") as output:
        process = subprocess.Popen(
            strata_argv(argv), cwd=demo.folder, env=demo.env, stdout=output, stderr=output
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
            try:
                code = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise AssertionError(f"{shlex.join(argv)} did not stop on Ctrl-C") from None
    assert code == 0, f"{shlex.join(argv)} exited {code} on Ctrl-C:\n{log.read_text()[-3000:]}"


def wait_answers(process: subprocess.Popen, target: str, log: Path) -> int:
    """Until the server at `target` answers a search; its hit count."""
    from service.api.grpc.client import StrataClient, StrataClientError

    deadline = time.monotonic() + READY_S
    while True:
        assert process.poll() is None, (
            f"the server exited {process.returncode}:\n" + (log.read_text()[-3000:])
        )
        try:
            with StrataClient(target, timeout=5) as client:
                return len(client.search("a dog on the beach", k=3).hits)
        except StrataClientError:
            assert time.monotonic() < deadline, f"no answer from {target} after {READY_S:.0f} s"
            time.sleep(0.5)


def http_hits(port: int) -> int:
    body = json.dumps({"query": {"text": "a dog on the beach"}, "topK": 3}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/search",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return len(json.load(response)["hits"])


# --- the tests ------------------------------------------------------------------------------


def test_the_examples_are_found_and_few_are_exempt(examples: list[Example]):
    lines = [e.line for e in examples]
    print(f"\n{len(examples)} help examples found, {len(EXEMPT)} exempt")
    assert len(examples) >= 50, "the command tree's examples were not all found"
    assert all(argv[0] == "strata" for argv in (e.argv for e in examples))
    assert len(EXEMPT) <= MAX_EXEMPT, "the exempt list grows: make the example runnable"
    assert all(reason.strip() for reason in EXEMPT.values())
    assert set(EXEMPT) <= set(lines), f"exempt but no longer an example: {set(EXEMPT) - set(lines)}"
    kinds = {e.kind for e in examples}
    assert kinds == {"offline", "serve", "client"}


def run_help(number: int, group: list[Example], demo: Demo, root: Path) -> list[Outcome]:
    """One help's examples, in order, in a fresh copy of the demo's working folder."""
    folder = root / f"help-{number}"
    shutil.copytree(demo.folder, folder, symlinks=True)
    # Redis keys of its own too: a version this copy announces names a folder of this copy
    env = {**demo.env, "STRATA_REDIS_PREFIX": f"{demo.env['STRATA_REDIS_PREFIX']}-{number}"}
    outcomes = []
    for example in group:
        started = time.monotonic()
        try:
            result = run(example.argv, folder, env)
        except subprocess.TimeoutExpired:
            outcomes.append(
                Outcome(
                    example,
                    time.monotonic() - started,
                    f"{example.line}\n  (from `{example.help} --help`) ran past {TIMEOUT_S} s",
                )
            )
            continue
        problem = failure(example, result) if result.returncode != 0 else None
        outcomes.append(Outcome(example, time.monotonic() - started, problem))
    shutil.rmtree(folder)
    return outcomes


def covering(groups: list[list[Example]]) -> list[list[Example]]:
    """The helps' sequences less those that only repeat the start of another (`strata embed
    pairs` alone, and first before `strata eval upgrade`): same folder, same commands."""

    def lines(group: list[Example]) -> list[str]:
        return [example.line for example in group]

    kept: list[list[Example]] = []
    for group in sorted(groups, key=len, reverse=True):
        if not any(lines(other)[: len(group)] == lines(group) for other in kept):
            kept.append(group)
    return kept


def test_offline_examples_run_after_the_demo(examples: list[Example], demo: Demo, tmp_path: Path):
    """Each help's examples in order, in a fresh copy of the demo's working folder; two helps
    at a time (most of an example's time is starting Python and loading a model)."""
    by_help: dict[str, list[Example]] = {}
    for example in examples:
        if example.kind == "offline" and example.line not in EXEMPT:
            by_help.setdefault(example.help, []).append(example)
    groups = covering(list(by_help.values()))
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = [
            pool.submit(run_help, number, group, demo, tmp_path)
            for number, group in enumerate(groups)
        ]
        outcomes = [outcome for future in runs for outcome in future.result()]
    failures = [o.problem for o in outcomes if o.problem]
    slowest = sorted(outcomes, key=lambda o: -o.seconds)[:8]
    print(
        f"\ndemo {demo.seconds:.1f} s; {len(outcomes)} examples run to completion; slowest:\n"
        + "\n".join(f"  {o.seconds:5.1f} s  {o.example.line}" for o in slowest)
    )
    ran = len(outcomes)
    assert not failures, f"{len(failures)} of {ran} examples failed:\n\n" + "\n\n".join(failures)
    run_lines = {o.example.line for o in outcomes}
    assert all(e.line in run_lines for group in by_help.values() for e in group)


def distinct(examples: Iterable[Example]) -> list[Example]:
    """One of each line: a serve or client example changes no file, so a line two helps show
    (`strata serve --bundles runs/demo/bundles-flickr8k`) gives the same result twice."""
    first: dict[str, Example] = {}
    for example in examples:
        first.setdefault(example.line, example)
    return list(first.values())


def test_serve_examples_answer_and_stop_on_ctrl_c(
    examples: list[Example], demo: Demo, ports: None, tmp_path: Path
):
    served = distinct(e for e in examples if e.kind == "serve" and e.line not in EXEMPT)
    assert served
    for number, example in enumerate(served):
        port = int(example.option("--port") or 50051)
        http_port = example.option("--http-port")
        for taken in (port, *([int(http_port)] if http_port else [])):
            wait_port_free(taken)
        log = tmp_path / f"serve-{number}.log"
        with serving(example.argv, demo, log) as process:
            assert wait_answers(process, f"127.0.0.1:{port}", log) == 3, example.line
            if http_port:
                assert http_hits(int(http_port)) == 3, example.line
    print(f"\n{len(served)} serve examples answered and stopped")


def test_client_examples_run_against_a_server(
    examples: list[Example], demo: Demo, ports: None, tmp_path: Path
):
    """Each against one server on the default target, the one most examples leave implicit."""
    clients = distinct(e for e in examples if e.kind == "client" and e.line not in EXEMPT)
    assert all(e.option("--target") in (None, DEFAULT_TARGET) for e in clients)
    wait_port_free(50051)
    log = tmp_path / "server.log"
    failures = []
    argv = ["strata", "serve", "--bundles", BUNDLES, "--workers", "1"]
    with serving(argv, demo, log) as process:
        wait_answers(process, DEFAULT_TARGET, log)
        for example in clients:
            result = run(example.argv, demo.folder, demo.env)
            if result.returncode != 0:
                failures.append(failure(example, result))
    print(f"\n{len(clients)} client examples run against {DEFAULT_TARGET}")
    assert not failures, f"{len(failures)} of {len(clients)} failed:\n\n" + "\n\n".join(failures)
