"""``ascendpipe`` command line: a thin shell over the API, one small module per command.

Only the module of the command being run is imported, so ``ascendpipe build`` on a fresh pipeline
pays for nothing else. Errors: a ``UserError`` is one line on stderr and exit code 2; a failed stage
is exit code 1; anything else is a bug and shows its traceback. A stdout that is closed (``>&-``) or
whose reader went away (``| head -1``) ends quietly with exit 0; a working folder that was deleted, or
whose name the locale cannot encode, is one line before anything starts.
"""

from __future__ import annotations

import os
import sys

COMMANDS = {
    "build": "ascendpipe.cli.build",
    "status": "ascendpipe.cli.status",
    "dag": "ascendpipe.cli.dag",
    "validate": "ascendpipe.cli.validate",
    "runs": "ascendpipe.cli.runs",
    "show": "ascendpipe.cli.show",
    "diff": "ascendpipe.cli.diff",
    "gc": "ascendpipe.cli.gc",
    "push": "ascendpipe.cli.push",
    "pull": "ascendpipe.cli.pull",
    "convert": "ascendpipe.cli.convert",
    "infer": "ascendpipe.cli.infer",
    "dump": "ascendpipe.cli.dump",
    "compare": "ascendpipe.cli.compare",
    "profile": "ascendpipe.cli.profile",
    "tune": "ascendpipe.cli.tune",
    "fix": "ascendpipe.cli.fix",
    "quantize": "ascendpipe.cli.quantize",
    "import": "ascendpipe.cli.import_",
    "report": "ascendpipe.cli.report",
    "checkout": "ascendpipe.cli.checkout",
    "export": "ascendpipe.cli.export",
    "doctor": "ascendpipe.cli.doctor",
}


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else the terminal's, else 80."""
    import os

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _help_formatter():
    """The formatter class, made on first use: argparse is imported only when a command is parsed
    (a replayed no-op, engine/noop_replay.py, never parses)."""
    import argparse

    class _HelpFormatter(argparse.HelpFormatter):
        """Help without the underscore spellings of flags (``--batch_size`` beside ``--batch-size``):
        they are accepted as ATC writes them, but listing both doubles every line. Its width is read as
        ``shutil.get_terminal_size`` reads it, without importing shutil (argparse makes a formatter for
        every flag it adds: the import was a no-op build's)."""

        def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
            if width is None:
                width = _terminal_columns() - 2
            super().__init__(prog, indent_increment, max_help_position, width)

        def _format_action_invocation(self, action):
            strings = list(action.option_strings)
            if len(strings) > 1:
                hyphenated = {s for s in strings if "_" not in s}
                strings = [s for s in dict.fromkeys(strings) if "_" not in s or s.replace("_", "-") not in hyphenated]
                action = argparse.Action(strings, action.dest, nargs=action.nargs, default=action.default,
                                         type=action.type, choices=action.choices, required=action.required,
                                         help=action.help, metavar=action.metavar)
            return super()._format_action_invocation(action)

    return _HelpFormatter


def _parser(only: str | None):
    import argparse
    import importlib

    from ascendpipe import __version__

    formatter = _help_formatter()
    parser = argparse.ArgumentParser(
        prog="ascendpipe",
        description="Reproducible model deployment to Huawei Ascend NPUs: pipelines, device emulation, accuracy compare.",
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"ascendpipe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            if only is not None:
                raise
            sub.add_parser(name, help=f"(unavailable: {exc})")
            continue
        p = sub.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
                           formatter_class=formatter)
        module.add_arguments(p)
        hidden = [s for a in p._actions for s in a.option_strings if "_" in s and s.replace("_", "-") in a.option_strings]
        if hidden:  # the formatter leaves them out of the list: say once that they work
            p.epilog = "Each flag also takes the spelling with underscores, as ATC and ais_bench write it."
        p.set_defaults(_main=module.main)
    return parser


def _open_streams() -> None:
    """A closed stdout or stderr (``ascendpipe build >&-``) is None in Python: write to nowhere instead."""
    import os

    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")


def _quiet_stdout(stream=None) -> None:
    """The reader of stdout (or ``stream``: stderr under ``2>&1 | head``) went away (``| head -1``,
    ``| true``): drop what is still buffered, so that Python's own flush at exit does not fail too
    (exit code 120)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (stream or sys.stdout).fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _reader_gone(exc: BaseException) -> bool:
    """A write failed because nobody reads the stream any more: a closed pipe (EPIPE: ``| head -1``), a
    terminal hung up (EIO: a closed ssh session or terminal window, write(2) on a tty whose other side is
    gone), a terminal device that went away (ENXIO)."""
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.EPIPE, errno.EIO, errno.ENXIO)


class _ReaderMayGo:
    """sys.stdout (and sys.stderr) while a command runs: a reader that goes away (``build ... | head
    -3``, a terminal closed mid-build) ends the printing, never the command. A write or flush that meets
    the closed pipe or the hung-up terminal points the stream at /dev/null (``_quiet_stdout``) and goes
    on, so a build finishes and records its stages as they ended, and ``fix`` restores the workspace,
    whatever the reader did (it was BrokenPipeError, or OSError EIO, in the middle of a build, the
    stage recorded as failed)."""

    def __init__(self, stream):
        self._stream = stream
        self.reader_gone = False

    def write(self, text):
        if self.reader_gone:
            return len(text)
        try:
            return self._stream.write(text)
        except OSError as exc:
            if not _reader_gone(exc):
                raise
            self._gone()
            return len(text)

    def flush(self):
        if self.reader_gone:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            if not _reader_gone(exc):
                raise
            self._gone()
            try:
                self._stream.flush()  # what was buffered goes to /dev/null now
            except (OSError, ValueError):
                pass

    def _gone(self):
        self.reader_gone = True
        _quiet_stdout(self._stream)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):  # isatty, fileno, encoding, buffer ...: the stream's own
        return getattr(self._stream, name)


def _remove_fresh_output(path: str) -> None:
    """The --output folder a refused command made itself (it was not there before): removed, so a
    refusal leaves nothing written. One that was there before is never touched."""
    import shutil

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)


def _where_we_stand(argv: list[str]) -> str | None:
    """The one line that refuses to start, when the folder we run in is gone or its name (or an
    argument) cannot be encoded under the locale; None when all is well."""
    import os

    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        return "the current folder no longer exists (it was deleted or moved); cd to a workspace and run it again"
    encoding = sys.getfilesystemencoding()
    for text, what in [(cwd, "the current folder")] + [(a, "the argument") for a in argv]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes, kept as surrogates by Python's C locale
            shown = os.fsencode(text).decode("utf-8", "backslashreplace")
            return (f"{what} '{shown}' has letters the locale's encoding ({encoding}) cannot read; "
                    f"run with a UTF-8 locale (e.g. LC_ALL=C.UTF-8) or PYTHONUTF8=1")
    return None


def main(argv: list[str] | None = None) -> int:
    _open_streams()
    given, given_err = sys.stdout, sys.stderr
    if not isinstance(given, _ReaderMayGo):
        sys.stdout = _ReaderMayGo(given)
    if not isinstance(given_err, _ReaderMayGo):  # `build ... 2>&1 | head -3`: stderr's reader goes too
        sys.stderr = _ReaderMayGo(given_err)
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    finally:  # whatever the outcome (argparse's exit too), a reader that went away is no error of ours
        sys.stdout, sys.stderr = given, given_err
        for stream in (sys.stdout, sys.stderr):
            try:  # (`status p.yaml | true` was exit 120: Python's own flush at exit failing)
                stream.flush()
            except OSError as exc:
                if _reader_gone(exc):
                    _quiet_stdout(stream)
            except ValueError:
                pass


def _main(argv: list[str]) -> int:
    from ascendpipe.errors import StageFailed, UserError

    refusal = _where_we_stand(argv)
    if refusal:
        sys.stderr.write(f"ascendpipe: error: {refusal}\n")
        return 2
    if argv[:1] == ["build"]:  # a no-op remembered for this very command line (engine/noop_memo.py)
        from ascendpipe.engine.noop_replay import replay

        try:
            code = replay(argv)
        except UserError as err:
            sys.stderr.write(f"ascendpipe: error: {err}\n")
            return err.exit_code
        if code is not None:
            sys.stdout.flush()
            return code
    only = argv[0] if argv and argv[0] in COMMANDS else None
    parser = _parser(only)
    args, extra = parser.parse_known_args(argv)
    if extra:
        # `build P --force data`: argparse gives every positional its values in the first run of
        # positionals, so a STAGE after an option is left over; it is still a STAGE.
        if isinstance(getattr(args, "stages", None), list) and not any(a.startswith("-") for a in extra):
            args.stages.extend(extra)
        else:
            parser.parse_args(argv)  # argparse's own one-line error and exit 2
    if not getattr(args, "_main", None):
        parser.print_help()
        return 2
    args._argv = argv  # the command line as given (build remembers a no-op for it)
    output = getattr(args, "output", None)
    fresh_output = output is not None and not os.path.lexists(str(output))
    try:
        code = int(args._main(args) or 0)
        sys.stdout.flush()  # here, not at exit: a reader that went away is caught below
        return code
    except UserError as err:
        if fresh_output:  # refused part-way (values onnxruntime will not run): nothing left of ours
            _remove_fresh_output(str(output))
        sys.stderr.write(f"ascendpipe: error: {err}\n")
        return err.exit_code  # 2; 1 where the input was fine but the moment was not (a busy database)
    except StageFailed as err:
        sys.stderr.write(f"ascendpipe: {err}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("ascendpipe: interrupted\n")
        return 130
    except OSError as err:
        if not _reader_gone(err):
            return _failed(err, args)
        _quiet_stdout()
        return 0
    except Exception as err:
        return _failed(err, args)


def _failed(err: BaseException, args) -> int:
    """Exit code and line of an exception no command handled: the machine's (one line) or a bug's
    (its traceback: called while the exception is being handled)."""
    from ascendpipe.store.failures import explain, is_environmental

    if is_environmental(err):  # a full disk, a read-only folder: the machine's, not a bug
        where = getattr(args, "output", None) or getattr(args, "out", None)
        sys.stderr.write(f"ascendpipe: error: {explain(err, str(where) if where else None, retry='run it again')}\n")
        return 1
    import traceback

    traceback.print_exc()
    sys.stderr.write("ascendpipe: internal error (a bug in ascendpipe, not in your input); please report it with "
                     "the traceback above\n")
    return 3


if __name__ == "__main__":
    sys.exit(main())
