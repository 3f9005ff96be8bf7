"""Run `strata` command lines, each in a forked child process of this one (see conftest).

    python tests/indexer/cli_runner.py JOBS.json

JOBS.json: a list of {args, env, stdout, stderr}. The CLI is imported once, before any FAISS or
OpenMP work, then every job runs in its own child: the job's environment variables are set,
stdout and stderr go to its files, and `service.cli.main()` runs with its arguments — the same
code path as the `strata` command. A job that kills itself (STRATA_INDEX_CRASH_AT) dies like a
killed process. Prints the exit codes as a JSON list (−N for a child killed by signal N).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def run_child(job: dict) -> int:
    os.environ.update(job["env"])
    for descriptor, path in ((1, job["stdout"]), (2, job["stderr"])):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, descriptor)
        os.close(handle)
    from service.cli import main

    sys.argv = ["strata", *job["args"]]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def main(jobs_file: str) -> None:
    # the expensive imports, paid once (the commands load lazily: each child would pay them)
    import indexer.cli.index  # noqa: F401
    import service.cli
    import service.cli.search
    import service.cli.serve  # noqa: F401
    import training.cli  # noqa: F401

    jobs = json.loads(Path(jobs_file).read_text())
    codes = []
    for job in jobs:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child never returns into this loop
            code = 1
            try:
                code = run_child(job)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    print(json.dumps(codes))


if __name__ == "__main__":
    main(sys.argv[1])
