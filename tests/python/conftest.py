"""Fixtures: stubs generated from proto/ at test time, and a real engramd.

ENGRAMD names the server binary (default: target/debug/engramd).
"""

import os
import subprocess
import sys
import tempfile

import grpc
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    """The engram.v1 modules, generated from proto/ with grpcio-tools."""
    from grpc_tools import protoc
    import grpc_tools

    out = tmp_path_factory.mktemp("stubs")
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    protos = ["engram/v1/types.proto", "engram/v1/service.proto"]
    rc = protoc.main(["protoc", f"-I{ROOT}/proto", f"-I{well_known}",
                      f"--python_out={out}", f"--grpc_python_out={out}", *protos])
    assert rc == 0, "protoc failed"
    sys.path.insert(0, str(out))
    from engram.v1 import service_pb2, service_pb2_grpc, types_pb2

    class Stubs:
        service = service_pb2
        types = types_pb2
        grpc = service_pb2_grpc

    return Stubs


@pytest.fixture(scope="session")
def engramd():
    """A real engramd on 127.0.0.1:0 over a temp data dir; its address."""
    binary = os.environ.get("ENGRAMD", os.path.join(ROOT, "target", "debug", "engramd"))
    with tempfile.TemporaryDirectory() as data:
        env = dict(os.environ, ENGRAM__SERVER__LISTEN="127.0.0.1:0",
                   ENGRAM__STORE__DATA_DIR=data, ENGRAM__LOG__LEVEL="warn")
        proc = subprocess.Popen([binary], env=env, stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline().strip()
        prefix = "engramd listening on "
        assert line.startswith(prefix), f"engramd did not start: {line!r}"
        try:
            yield line[len(prefix):]
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.fixture
def client(pb, engramd):
    channel = grpc.insecure_channel(engramd)
    yield pb.grpc.MemoryServiceStub(channel)
    channel.close()
