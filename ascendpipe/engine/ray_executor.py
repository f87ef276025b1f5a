"""Stages as Ray tasks: the driver decides, keys and records; a Ray worker only runs a stage.

doit still orders the stages on the driver (``--keep-going`` and skipping work as locally); each
ready stage's thread submits one Ray task (``engine/worker.py: run_job``) with the stage's
``resources:`` and waits for it. Ray's accelerator support knows ``NPU`` and sets
``ASCEND_RT_VISIBLE_DEVICES`` for each task, so ``resources: {NPU: 1}`` pins one Ascend device.

A worker killed mid-stage, or a lost node, makes Ray rerun the task (``--retries``); when the
retries run out the stage fails with that reason. Either way nothing is recorded until the outputs
are back and stored, so a dead worker never leaves a stage recorded as built.
"""

from __future__ import annotations

import os

from ascendpipe.errors import StageFailed, UserError

LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024  # stages exchange files, not objects: keep it small


class RayRunner:
    def __init__(self, ws, remote, options, run_id: int):
        self.ws = ws
        self.run_id = run_id
        self.remote = remote
        self.options = options
        self.retries = max(0, int(options.retries))
        self.mode = "remote" if remote is not None else "shared"
        self._owned = False
        self._task = None
        self._token = None
        self._known: set[str] = set()  # objects known to be in the remote
        self.cluster: dict = {}

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        try:
            import ray
        except ImportError:
            raise UserError("--executor ray needs Ray: pip install ray (in a clone: pip install -e '.[ray]')") from None
        from ascendpipe.engine.worker import run_job

        if not ray.is_initialized():
            address = self.options.address
            kwargs = {"include_dashboard": False, "logging_level": "WARNING", "log_to_driver": False}
            try:
                if address:
                    _probe(address)
                    ray.init(address=address, **kwargs)
                else:
                    # a private local instance, reachable from this host only; the raylet reaps what a
                    # killed worker's stage left running
                    with _loopback_only(ray):
                        ray.init(address="local", object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                                 _system_config={"kill_child_processes_on_worker_exit_with_raylet_subreaper": True}, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = address or "a new local instance"
                raise UserError(f"cannot start or reach the Ray cluster at {where}: {str(exc).strip().splitlines()[0]}") from None
            self._owned = True
        self.cluster = dict(ray.cluster_resources())
        self._task = ray.remote(run_job)
        if self.mode == "shared":
            import uuid

            from ascendpipe.engine.worker import token_path
            from ascendpipe.store.statefiles import write_state_file

            self._token = uuid.uuid4().hex
            self._token_file = token_path(self.ws.root, self.run_id)
            write_state_file(self.ws.state_dir, self._token_file, self._token.encode(), "the workers' token folder")

    def close(self) -> None:
        if self._token is not None:
            try:
                os.unlink(self._token_file)
            except OSError:
                pass
        if self._owned:
            import ray

            ray.shutdown()
            self._owned = False

    # -- one stage -----------------------------------------------------------------------------
    def task_options(self, stage) -> dict:
        """Ray task options from the stage's ``resources:`` (checked against the cluster's totals)."""
        res = dict(stage.resources or {})
        opts = {"num_cpus": res.pop("CPU", 1), "max_retries": self.retries, "retry_exceptions": False}
        if "GPU" in res:
            opts["num_gpus"] = res.pop("GPU")
        if "memory" in res:
            opts["memory"] = int(res.pop("memory"))
        if res:
            opts["resources"] = res
        wanted = {"CPU": opts["num_cpus"], "GPU": opts.get("num_gpus", 0), "memory": opts.get("memory", 0), **res}
        for name, amount in wanted.items():
            have = self.cluster.get(name, 0)
            if amount and amount > have:
                shown = f"{have / 1e9:.1f} GB" if name == "memory" else (f"{have:g}" if have else "none")
                raise StageFailed(stage.name, f"needs {name}: {amount:g} but the Ray cluster has {shown} in all")
        return opts

    def run_and_store(self, executor, stage, log: str):
        import ray

        from ascendpipe.stages.base import StageResult

        job = self._job(executor, stage, log)
        opts = self.task_options(stage)
        try:
            reply = ray.get(self._task.options(**opts).remote(job))
            if reply.get("corrupt_input"):
                # the worker found (and deleted) a corrupted input in the remote: upload ours, once more
                self._known.discard(reply["corrupt_input"])
                self._publish_deps(executor, job["deps"])
                reply = ray.get(self._task.options(**opts).remote(job))
        except ray.exceptions.RayTaskError as exc:  # a bug in ascendpipe's worker code: keep the trace
            _write_log(self.ws.abs(log), str(exc))
            raise StageFailed(stage.name, f"the Ray task raised {type(exc.cause).__name__ if exc.cause else 'an error'}", log) from None
        except ray.exceptions.RayError as exc:  # worker killed, node lost, out of memory, ...
            tries = self.retries + 1
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise StageFailed(
                stage.name, f"its Ray worker was lost {tries} time{'s' if tries > 1 else ''} ({type(exc).__name__}: {first[:160]}); nothing recorded",
                log,
            ) from None
        if reply.get("log_text") is not None:
            _write_log(self.ws.abs(log), reply["log_text"])
        if not reply["ok"]:
            raise StageFailed(stage.name, reply["error"], log)
        # where it ran goes into the record (info), never into the outputs
        info = {**(reply.get("info") or {}), "ray_worker": reply.get("worker")}
        result = StageResult(metrics=reply.get("metrics"), remedy_files=reply.get("remedy_files"), info=info)
        if self.mode == "shared":
            for out in stage.outs:
                executor.hasher.forget(out)
            return result, executor._store_outputs(stage)
        return result, self._bring_back(executor, stage, reply, result)

    def _job(self, executor, stage, log: str) -> dict:
        pipeline = executor.pipeline
        job = {
            "mode": self.mode,
            "run_id": executor.run_id,
            "stage": stage.to_json(),
            "upstream_kinds": {up: pipeline.stages[up].kind for up in stage.upstream.values()},
            "pipeline_path": pipeline.path,
            "backend": pipeline.backend,
            "build_dir": pipeline.build_dir,
            "thresholds": dict(pipeline.thresholds),
            "log": log,
        }
        if self.mode == "shared":
            job.update(root=self.ws.root, token=self._token)
            return job
        deps = dict(executor.components(stage)["deps"])
        self._publish_deps(executor, deps)
        job.update(remote=self.remote.url, deps=deps)
        return job

    def _publish_deps(self, executor, deps: dict) -> None:
        """Make every dep the worker needs available in the remote (source files included)."""
        objects = executor.objects
        for rel, digest in deps.items():
            if digest is None or digest in self._known:
                continue
            absolute = self.ws.abs(rel)
            if not objects.has(digest):
                if os.path.isdir(absolute):
                    found, entries = executor.hasher.dir_manifest(rel)
                    if found != digest:
                        raise StageFailed(rel, f"dep {rel} changed while the build ran")
                    objects.put_dir(absolute, digest, entries)
                else:
                    objects.put_file(absolute, digest)
            self.remote.push_object(objects, digest, self._known)

    def _bring_back(self, executor, stage, reply: dict, result) -> dict:
        """Fetch the outputs the worker stored in the remote, verified, into cache/ and the workspace;
        then publish the stage's entry so other workspaces restore it instead of running it."""
        from ascendpipe.engine.remote_sync import publish
        from ascendpipe.store.objects import CorruptObject

        outs = reply["outs"]
        if set(outs) != set(stage.outs):
            raise StageFailed(stage.name, f"the worker returned outputs {sorted(outs)}, expected {sorted(stage.outs)}")
        try:
            for out, digest in outs.items():
                self.remote.fetch_object(executor.objects, digest)
                executor.objects.restore(digest, self.ws.abs(out))
                executor.hasher.forget(out)
                self._known.add(digest)
        except (FileNotFoundError, CorruptObject) as exc:
            raise StageFailed(stage.name, f"its outputs could not be fetched intact from the remote cache ({exc}); nothing recorded") from None
        info = {k: v for k, v in result.info.items() if k != "ray_worker"}
        entry = {"outs": dict(outs), "metrics": result.metrics, "remedy": executor._remedy_blobs(stage, result), "info": info}
        publish(self.remote, executor.objects, executor.keys[stage.name], stage.name, entry, self._known)
        return dict(outs)


# Ray's own switch for a node that must not be part of a cluster (its default on macOS and Windows):
# off, the node's address is the loopback one and its servers (GCS, raylet, workers, object manager)
# listen on 127.0.0.1 only. `_node_ip_address="127.0.0.1"` does not do it: Ray maps a loopback
# address to the host's network address (ray/_private/services.py: resolve_ip_for_localhost ->
# get_node_ip_address, which returns the loopback address only when ENABLE_RAY_CLUSTER is off;
# ray/_private/ray_constants.py: ENABLE_RAY_CLUSTER = env_bool("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", ...)).
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class _loopback_only:
    """For the start of a local instance: Ray's processes inherit the setting, this process reads it
    from ray_constants (already imported with ray), and both are put back afterwards."""

    def __init__(self, ray):
        self.ray = ray

    def __enter__(self):
        self.env = os.environ.get(LOCAL_ONLY_ENV)
        os.environ[LOCAL_ONLY_ENV] = "0"
        try:
            from ray._private import ray_constants

            self.constants = ray_constants
            self.before = ray_constants.ENABLE_RAY_CLUSTER
            ray_constants.ENABLE_RAY_CLUSTER = False
        except (ImportError, AttributeError):  # another Ray layout: the environment still tells its processes
            self.constants = None
        return self

    def __exit__(self, *exc):
        if self.env is None:
            os.environ.pop(LOCAL_ONLY_ENV, None)
        else:
            os.environ[LOCAL_ONLY_ENV] = self.env
        if self.constants is not None:
            self.constants.ENABLE_RAY_CLUSTER = self.before
        return False


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail in seconds when nothing listens at HOST:PORT (ray.init would retry for minutes)."""
    import socket

    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return  # 'auto' and the like: Ray resolves those itself
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {host}:{port} ({exc.strerror or exc})") from None


def _write_log(path: str, text: str) -> None:
    from ascendpipe.fsutil import write_text_atomic

    write_text_atomic(path, text)
