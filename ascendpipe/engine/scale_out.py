"""What a build adds when it scales out: the shared remote cache, and where stages run.

Attached to the StageExecutor before anything is decided; started only when something is stale, so
a no-op build neither contacts the remote nor starts Ray.
"""

from __future__ import annotations

from ascendpipe.errors import UserError

EXECUTORS = ("local", "ray")


class ScaleOut:
    def __init__(self, executor, pipeline, ws, options, url: str | None):
        self.executor = executor
        self.pipeline = pipeline
        self.ws = ws
        self.options = options
        self.url = url
        self.runner = None

    def start(self, jobs: int | None, order: list[str]) -> int:
        """Reach the remote (one clear line if it cannot be reached) and start the runner.
        Returns how many stages the scheduler may hand out at once."""
        from ascendpipe.engine.remote_sync import RestoreOnly, open_remote

        if self.url:
            self.executor.remote = open_remote(self.url)
        if self.options.restore_only:
            if not self.url:
                raise UserError("no remote cache to pull from: set `remote: s3://BUCKET/PREFIX` in the pipeline, or pass --remote URL")
            self.executor.runner = RestoreOnly()
            return max(1, jobs or 1)
        if self.options.executor == "ray":
            from ascendpipe.engine.ray_executor import RayRunner

            self.runner = RayRunner(self.ws, self.executor.remote, self.options, self.executor.run_id)
            self.runner.start()
            self.executor.runner = self.runner
            # the cluster's resources decide how many run at once; -j N caps it
            return max(1, jobs) if jobs else max(1, len(order))
        return max(1, jobs or 1)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()


def attach(executor, pipeline, ws, order, options):
    from ascendpipe.store.remote import remote_url

    if options.executor not in EXECUTORS:
        raise UserError(f"unknown executor '{options.executor}'; known: {', '.join(EXECUTORS)}")
    url = remote_url(options.remote, getattr(pipeline, "remote", None), ws.root) if options.use_remote else None
    if options.executor == "local" and not url and not options.restore_only:
        return None
    return ScaleOut(executor, pipeline, ws, options, url)
