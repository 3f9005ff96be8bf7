"""Generate the Python code of `proto/` into `service/_generated/` (committed, checked by tests).

    python -m service.proto_codegen            # regenerate in place
    python -m service.proto_codegen --out DIR  # write elsewhere (the currency test does)

For each proto file (search.proto, admin.proto) grpc_tools.protoc writes `strata/v1/x_pb2.py`
(messages), `x_pb2.pyi` (type stubs) and `x_pb2_grpc.py` (stub and servicer). protoc names
the messages module in the gRPC module after the proto path (`from strata.v1 import x_pb2`),
which would need `strata` to be a top-level package; the one post-processing step here rewrites
that import to a relative one, so the code imports as `service._generated.strata.v1` with no
sys.path changes.
"""

from __future__ import annotations

import argparse
import re
from importlib import resources
from pathlib import Path

from training.core.errors import InputError

REPO = Path(__file__).resolve().parents[1]
PROTO_ROOT = REPO / "proto"
PROTO_FILES = ("strata/v1/search.proto", "strata/v1/admin.proto")
GENERATED = Path(__file__).resolve().parent / "_generated"
_ABSOLUTE_IMPORT = re.compile(r"^from strata\.v1 import (\w+_pb2) as ", re.MULTILINE)


def generated_files(proto: str) -> list[str]:
    """The files protoc writes for one proto file, relative to the output folder."""
    stem = proto.removesuffix(".proto")
    return [f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"]


def relative_imports(source: str) -> str:
    """`from strata.v1 import x_pb2 as ...` → `from . import x_pb2 as ...`."""
    return _ABSOLUTE_IMPORT.sub(r"from . import \1 as ", source)


def generate(out: Path = GENERATED) -> list[Path]:
    """Run protoc on every proto file into `out`; return the files written."""
    from grpc_tools import protoc

    well_known = resources.files("grpc_tools") / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    for proto in PROTO_FILES:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            proto,
        ]
        if protoc.main(args) != 0:
            raise InputError(f"protoc failed on {PROTO_ROOT / proto}")
    written = [out / name for proto in PROTO_FILES for name in generated_files(proto)]
    for path in written:
        path.write_text(relative_imports(path.read_text()))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=GENERATED, help="output folder")
    for path in generate(parser.parse_args().out):
        print(path)


if __name__ == "__main__":
    main()
