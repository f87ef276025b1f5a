"""A local Ray started by `--executor ray` without `--address` listens on the loopback address only:
a stage running on it lists the TCP sockets Ray's own processes listen on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Runs as the stage, on a Ray worker: every listening TCP socket of a Ray process (gcs_server,
# raylet, workers), found through /proc (socket inodes under /proc/PID/fd, /proc/net/tcp{,6}).
LISTENERS = r'''
import json, os, socket, struct, sys
def addr(hexaddr):
    host, port = hexaddr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(host, 16))), int(port, 16)
    words = b"".join(struct.pack("<I", int(host[i:i + 8], 16)) for i in range(0, 32, 8))
    return socket.inet_ntop(socket.AF_INET6, words), int(port, 16)
listening = {}
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A":  # LISTEN
            listening[f[9]] = addr(f[1])
# only this build's instance (others may run on the host): the processes descended from the
# driver, which is the parent of the raylet this stage's worker runs under
parent, comm_of = {}, {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat", "rb").read().decode(errors="replace")
        parent[int(pid)] = int(stat.rsplit(")", 1)[1].split()[1])
        comm_of[int(pid)] = open(f"/proc/{pid}/comm").read().strip()
    except (OSError, ValueError, IndexError):
        continue
node = os.getpid()
while node in parent and comm_of.get(node) != "raylet":
    node = parent[node]
driver = parent[node]
ours, todo = set(), [driver]
while todo:
    here = todo.pop()
    for pid, ppid in parent.items():
        if ppid == here and pid not in ours:
            ours.add(pid)
            todo.append(pid)
found = []
for pid in map(str, sorted(ours)):
    try:
        comm = comm_of[int(pid)]
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:[") and link[8:-1] in listening:
                found.append([comm, *listening[link[8:-1]]])
    except OSError:
        continue
json.dump(sorted(found), open(sys.argv[1], "w"))
'''


def test_a_local_ray_listens_on_loopback_only(tmp_path):
    pytest.importorskip("ray", reason="Ray executor tests need ray (pip install -e '.[ray]' in the clone; .ci/run does)")
    if not (tmp_path / "x").parent.exists() or not __import__("os").path.exists("/proc/net/tcp"):
        pytest.skip("needs /proc (Linux)")
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    (root / "listeners.py").write_text(LISTENERS)
    (root / "pipeline.yaml").write_text(
        "stages:\n  probe:\n    kind: run\n    cmd: python3 listeners.py listening.json\n"
        "    deps: [listeners.py]\n    outs: [listening.json]\n"
    )
    # a fresh process: no Ray instance to join, so the build starts its own local one
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml", "--executor", "ray"],
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    found = json.loads((root / "listening.json").read_text())
    assert any(name == "gcs_server" for name, _, _ in found), found
    assert any(name == "raylet" for name, _, _ in found), found
    exposed = [f for f in found if f[1] not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")]
    assert exposed == [], f"Ray listens beyond loopback: {exposed}"
