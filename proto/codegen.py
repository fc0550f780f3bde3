"""Generate ``stram_pb2.py`` and ``stram_pb2_grpc.py`` from ``stram.proto``.

The one way the generated modules are made: ``python proto/codegen.py``.
``tests/unit/common/test_proto.py`` regenerates into a temporary directory and fails if the
committed modules differ.
"""

from __future__ import annotations

import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent


def generate(out_dir: pathlib.Path = HERE) -> list[pathlib.Path]:
    """Run ``grpc_tools.protoc`` on ``stram.proto``, writing into ``out_dir``."""
    from grpc_tools import protoc  # only needed at development time

    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{HERE}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(HERE / "stram.proto"),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed on stram.proto")
    grpc_mod = out_dir / "stram_pb2_grpc.py"
    # protoc writes an absolute "import stram_pb2"; make it package-relative.
    text = grpc_mod.read_text()
    text = re.sub(r"^import stram_pb2 as", "from . import stram_pb2 as", text, flags=re.M)
    grpc_mod.write_text(text)
    return [out_dir / "stram_pb2.py", grpc_mod]


if __name__ == "__main__":
    for path in generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(f"wrote {path}")
