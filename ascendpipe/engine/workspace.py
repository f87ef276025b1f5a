"""Where a workspace keeps its state, and the lock that lets only one build write it at a time."""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time

from ascendpipe.contract import CACHE_DIR
from ascendpipe.errors import UserError


class Workspace:
    def __init__(self, root: str):
        self.root = root

    @property
    def state_dir(self) -> str:
        return os.path.join(self.root, ".ascendpipe")

    @property
    def db_path(self) -> str:
        return os.path.join(self.state_dir, "ascendpipe.db")

    @property
    def doit_db(self) -> str:
        return os.path.join(self.state_dir, "doit.sqlite3")

    @property
    def plans_dir(self) -> str:
        return os.path.join(self.state_dir, "plans")

    @property
    def cache_root(self) -> str:
        return os.path.join(self.root, CACHE_DIR)

    @property
    def lock_path(self) -> str:
        return os.path.join(self.state_dir, "build.lock")

    def abs(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def rel_pipeline(self, path: str) -> str:
        absolute = os.path.abspath(path)
        try:
            return os.path.relpath(absolute, self.root)
        except ValueError:
            return absolute


class BuildLock:
    """An exclusive ``flock`` on ``.ascendpipe/build.lock``; the holder writes who it is into it.

    The kernel releases a flock when its process dies (SIGKILL included), so a stale lock file never
    blocks a later build.
    """

    def __init__(self, ws: Workspace, *, wait: bool = True, timeout: float | None = None, stream=None):
        self.ws = ws
        self.wait = wait
        self.timeout = timeout
        self.stream = stream or sys.stderr
        self.fd = None

    def _holder(self) -> str:
        from ascendpipe.store.statefiles import lock_holder

        return lock_holder(self.ws.lock_path) or "another process"

    def acquire(self) -> "BuildLock":
        from ascendpipe.store.statefiles import open_nofollow, refuse_link

        os.makedirs(self.ws.state_dir, exist_ok=True)
        path = self.ws.lock_path
        refuse_link(path, "the build lock")  # never truncated or written through a link
        if os.path.isdir(path):
            raise UserError(f"{path} is a directory, not the build lock file; remove it (rmdir {path}) and build again")
        if os.path.lexists(path) and not os.path.isfile(path):
            raise UserError(f"{path} is not a regular file (the build lock must be one); remove it and build again")
        try:
            self.fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, "the build lock")
        except OSError as exc:
            from ascendpipe.store.failures import explain

            raise UserError(f"cannot open the build lock: {explain(exc, path)}") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder()
            if not self.wait:
                os.close(self.fd)
                self.fd = None
                raise UserError(
                    f"another build holds the workspace lock: {holder}; wait for it, or run without --no-wait",
                ) from None
            self.stream.write(f"waiting for the workspace lock held by {holder} ...\n")
            self.stream.flush()
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            while True:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() > deadline:
                        os.close(self.fd)
                        self.fd = None
                        raise UserError(f"gave up waiting for the workspace lock held by {holder}") from None
                    time.sleep(0.1)
        # the command as a user types it (python -m ascendpipe puts __main__.py's path in argv[0])
        info = {"pid": os.getpid(), "argv": ["ascendpipe", *sys.argv[1:]], "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, json.dumps(info).encode(), 0)
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
