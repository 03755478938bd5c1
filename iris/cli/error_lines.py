"""One place that turns whatever a CLI command raises into one line on stderr and an exit code.

Every `iris` command runs inside `run_cli`, so a command only has to raise: a user's
mistake (`ValueError`, a bad option) exits 2, a failure the user can act on (`KeyError`
for an unknown job, `CliError`, an unreachable Temporal) exits 1, and nothing ever
prints a traceback unless `IRIS_DEBUG=1` asks for one. The line names what is wrong;
typos in commands and options get click's and typer's "did you mean" suggestions.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import typer

try:  # typer >= 0.2x vendors click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer on real click
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

DEBUG_ENV = "IRIS_DEBUG"
USAGE = 2
"""Exit code of a command used wrongly (bad option, bad value, bad config), as click uses."""
FAILURE = 1
"""Exit code of a command that was used rightly but could not do its work (unknown job, no cluster)."""


_NO_ARGS_IS_HELP: type[Exception] = getattr(click_exceptions, "NoArgsIsHelpError", type("_Never", (Exception,), {}))


class CliError(Exception):
    """An expected failure with a message for the user and the exit code the command ends with."""

    def __init__(self, message: str, code: int = FAILURE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def one_line(text: str) -> str:
    """Collapse a (possibly multi-line) message into one line, keeping every part."""
    parts = [" ".join(line.split()) for line in str(text).splitlines()]
    return "; ".join(p for p in parts if p) or "(no message)"


def print_error(message: str) -> None:
    """`error: message` on stderr as one line: plain text, red only on a terminal, never wrapped."""
    label = "\x1b[31merror:\x1b[0m" if _is_tty(sys.stderr) else "error:"
    try:
        sys.stderr.write(f"{label} {one_line(message)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: nothing more to say
        pass


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty()) and os.environ.get("NO_COLOR") is None
    except (AttributeError, ValueError):
        return False


class _NeverRaisedError(Exception):
    """Stands for the SDK's RPCError in a command that never imported the SDK."""

    message = ""


def describe(exc: BaseException) -> tuple[str, int]:
    """The one-line message and exit code for an exception a command raised."""
    from pydantic import ValidationError

    # A Temporal error only if the command loaded the SDK (one that failed before connecting did not).
    RPCError = getattr(sys.modules.get("temporalio.service"), "RPCError", _NeverRaisedError)  # noqa: N806
    from iris.auth.errors import AUTH_EXIT_CODE, AuthenticationError, PermissionDeniedError
    from iris.types import JobFailedError

    match exc:
        case ValidationError():  # a value built in code (a config, settings) refused its input
            errors = exc.errors()
            where = ".".join(str(part) for part in errors[0]["loc"])
            return f"{exc.title}: {where + ': ' if where else ''}{errors[0]['msg']}", USAGE
        case CliError():
            return exc.message, exc.code
        case JobFailedError():
            return str(exc), FAILURE
        case UnicodeError():  # an argument that is not UTF-8 (the shell passed raw bytes)
            bad = getattr(exc, "object", "")[getattr(exc, "start", 0):getattr(exc, "end", 0)]
            shown = repr(bad.encode("utf-8", "surrogateescape")) if isinstance(bad, str) else repr(bad)
            return f"text must be valid UTF-8, got the bytes {shown}", USAGE
        case AuthenticationError() | PermissionDeniedError():  # team mode's refusals (iris/auth): exit 3
            return str(exc), AUTH_EXIT_CODE
        case KeyError():
            return str(exc.args[0]) if exc.args else "not found", FAILURE
        case ValueError():
            return str(exc), USAGE
        case RPCError():
            return f"Temporal: {exc.message or exc}", FAILURE
        case FileNotFoundError() | PermissionError() | IsADirectoryError() | NotADirectoryError():
            where = f"{exc.filename}: " if exc.filename else ""
            return f"{where}{exc.strerror or exc}", FAILURE
        case ConnectionError():
            return str(exc) or "connection failed", FAILURE
        case TimeoutError():
            return str(exc) or "timed out", FAILURE
        case RuntimeError() | OSError():
            return str(exc) or type(exc).__name__, FAILURE
    return f"{type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)", FAILURE


def _usage_message(exc: Any) -> str:
    """A click usage error as one line, with the command it was about and how to get help."""
    message = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        return f"{message} (see `{ctx.command_path} --help`)"
    return message


def run_cli(
    app: Callable[..., Any], args: Sequence[str] | None = None, *, prog_name: str = "iris",
    before_exit: Callable[[], None] | None = None,
) -> int:
    """Run a typer app without its standalone error handling; the exit code, every error as one line.

    `before_exit` runs after the command, whatever happened (the CLI shuts the Temporal
    runtime down there, so the interpreter never exits under the SDK's threads).
    """
    code = 0
    try:
        result = app(args=list(args) if args is not None else None, prog_name=prog_name, standalone_mode=False)
        code = result if isinstance(result, int) and not isinstance(result, bool) else 0
    except typer.Exit as e:
        code = e.exit_code
    except typer.Abort:
        print_error("aborted")
        code = 130
    except _NO_ARGS_IS_HELP:  # `iris job`: the group's help was printed already, as click does
        code = USAGE
    except click_exceptions.UsageError as e:
        print_error(_usage_message(e))
        code = e.exit_code
    except click_exceptions.ClickException as e:
        print_error(e.format_message())
        code = e.exit_code
    except KeyboardInterrupt:
        print_error("interrupted")
        code = 130
    except BrokenPipeError:
        # the reader went away (`iris job logs J | head`): stop quietly, as `cat` does
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        code = 141
    except Exception as e:
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        message, code = describe(e)
        print_error(message)
    finally:
        if before_exit is not None:
            try:
                before_exit()
            except Exception as e:  # never turn a finished command into a traceback
                if os.environ.get(DEBUG_ENV):
                    traceback.print_exc()
                print_error(f"while shutting down: {e}")
    return code


def exit_now(code: int) -> None:
    """Flush stdout and stderr and leave with `code`, without interpreter finalization.

    The Temporal SDK's Rust runtime keeps threads that call into Python; when the
    interpreter finalizes under them it can abort with `Fatal Python error:
    PyGILState_Release` (exit 134) after a command that succeeded (4 of 27 `iris cluster
    up` runs). Everything a command does is written and closed by the time it returns,
    so leaving here, before finalization, loses nothing and exits with the command's code.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
