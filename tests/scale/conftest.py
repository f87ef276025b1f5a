"""A real S3 server (moto, on 127.0.0.1) and a small local Ray instance, shared by the scale tests.

Both are started once per session and only by the tests that ask for them; each skips with its
reason when its package is absent. The AWS settings go into the environment before Ray starts so
Ray's workers inherit them, exactly as workers on a cluster read theirs from their environment.
"""

from __future__ import annotations

import io
import os
import shutil
import textwrap
import uuid
from pathlib import Path

import pytest

import ascendpipe

# a stage script: writes OUT (a file, or a folder of two files when OUT ends with '/') from its
# inputs and params, and counts its runs in COUNTER (outside the workspace)
STEP = """\
import json, os, sys
counter, out, *ins = sys.argv[1:]
with open(counter, "a") as f:
    f.write(os.environ["ASCENDPIPE_STAGE"] + "\\n")
params = json.loads(os.environ.get("ASCENDPIPE_PARAMS", "{}"))
text = "|".join(open(i).read() for i in ins) + json.dumps(params, sort_keys=True)
if out.endswith("/"):
    os.makedirs(out, exist_ok=True)
    open(os.path.join(out, "a.txt"), "w").write(text)
    os.makedirs(os.path.join(out, "sub"), exist_ok=True)
    open(os.path.join(out, "sub", "b.bin"), "wb").write(bytes(range(256)) * 8)
else:
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    open(out, "w").write(text)
"""


class Workspace:
    def __init__(self, root: Path, counter: Path):
        self.root = root
        self.counter = counter
        (root / ".ascendpipe").mkdir(parents=True, exist_ok=True)
        (root / "step.py").write_text(STEP)

    def write(self, rel: str, text: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
        return p

    def pipeline(self, text: str) -> Path:
        return self.write("pipeline.yaml", text.replace("COUNTER", str(self.counter)))

    def ran(self) -> list[str]:
        if not self.counter.exists():
            return []
        names = self.counter.read_text().split()
        self.counter.unlink()
        return sorted(names)

    def build(self, *args, **kw):
        kw.setdefault("quiet", True)
        kw.setdefault("stream", io.StringIO())
        return ascendpipe.build(str(self.root / "pipeline.yaml"), *args, **kw)

    def clone(self, name: str) -> "Workspace":
        """A fresh copy of the pipeline's files: no build/, no cache/, no .ascendpipe/ state."""
        root = self.root.parent / name
        root.mkdir()
        for item in self.root.iterdir():
            if item.name in ("build", "cache", ".ascendpipe", "data"):
                continue
            if item.is_file():
                shutil.copy2(item, root / item.name)
        return Workspace(root, self.counter)  # the copied pipeline names the same counter file

    def files(self, rel: str = "build") -> dict[str, bytes]:
        """Every output file's bytes (logs left out: they name the run)."""
        base = self.root / rel
        return {
            str(p.relative_to(self.root)): p.read_bytes()
            for p in sorted(base.rglob("*"))
            if p.is_file() and not p.name.endswith(".log") and ".tmp" not in p.name
        }


def states(run: dict) -> dict[str, str]:
    return {n: s["state"] for n, s in run["stages"].items()}


@pytest.fixture
def make_ws(tmp_path):
    def make(name: str = "ws") -> Workspace:
        root = tmp_path / name
        root.mkdir()
        return Workspace(root, tmp_path / f"{name}-runs.log")

    return make


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on 127.0.0.1 and the environment that points botocore at it."""
    pytest.importorskip("s3fs", reason="remote cache tests need s3fs (pip install -e '.[remote]' in the clone; .ci/run does)")
    moto_server = pytest.importorskip("moto.server", reason="remote cache tests need moto[server]")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env["AWS_ENDPOINT_URL"]
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


@pytest.fixture
def bucket(s3_server):
    """A new, empty bucket; returns its URL with a prefix."""
    import s3fs

    name = f"ap-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
    return f"s3://{name}/team/cache"


@pytest.fixture(scope="session")
def ray_local(s3_server, tmp_path_factory):
    """A small local Ray instance (4 logical CPUs, 2 NPUs, 100 MB object store, no dashboard).

    Started after the S3 environment so its workers inherit it."""
    ray = pytest.importorskip("ray", reason="Ray executor tests need ray (pip install -e '.[ray]' in the clone; .ci/run does)")
    os.environ["ASCENDPIPE_WORKER_CACHE"] = str(tmp_path_factory.mktemp("worker-cache"))
    ray.init(
        # two NPUs declared as a node with two Ascend devices would report them (none are used)
        address="local", num_cpus=4, resources={"NPU": 2}, object_store_memory=100 * 1024 * 1024, include_dashboard=False,
        logging_level="WARNING", log_to_driver=False,
        _system_config={"kill_child_processes_on_worker_exit_with_raylet_subreaper": True},
    )
    yield ray
    ray.shutdown()
