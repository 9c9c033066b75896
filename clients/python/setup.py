"""Generates the engram.v1 gRPC stubs from the repository's proto/ at build
time, so an installed package always matches the protos it was built from.

ENGRAM_PROTO_DIR overrides where the .proto files are (default: ../../proto,
the checkout this package lives in).
"""

import os

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = ["engram/v1/types.proto", "engram/v1/memory.proto",
          "engram/v1/facts.proto", "engram/v1/service.proto"]


def generate(out_dir):
    from grpc_tools import protoc
    import grpc_tools

    proto_dir = os.environ.get("ENGRAM_PROTO_DIR", os.path.join(HERE, "..", "..", "proto"))
    if not os.path.isfile(os.path.join(proto_dir, PROTOS[0])):
        raise SystemExit(f"engram-client: no {PROTOS[0]} under {proto_dir}; set ENGRAM_PROTO_DIR")
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    os.makedirs(os.path.join(out_dir, "engram", "v1"), exist_ok=True)
    rc = protoc.main(["grpc_tools.protoc", f"-I{proto_dir}", f"-I{well_known}",
                      f"--python_out={out_dir}", f"--pyi_out={out_dir}",
                      f"--grpc_python_out={out_dir}", *PROTOS])
    if rc != 0:
        raise SystemExit("engram-client: protoc failed")
    for pkg in ("engram", os.path.join("engram", "v1")):
        open(os.path.join(out_dir, pkg, "__init__.py"), "a").close()


# Before setup(): egg_info and build_py both look for the packages. The
# output (engram/v1/*.py under this directory) is git-ignored.
generate(HERE)
setup()
