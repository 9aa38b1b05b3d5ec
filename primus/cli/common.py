"""Shared CLI plumbing: the error contract and the --format option.

Exit status: 0 success; 1 a well-formed question with a negative answer (printed anyway); 2 bad or
refused input, as one line on stderr naming file, field and reason — never a traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from primus.cli.output import echo, exit_broken_pipe
from primus.errors import InputError
from primus.safe_text import one_line

if TYPE_CHECKING:
    from primus.job import Job

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_NEGATIVE = 1
EXIT_INPUT = 2


class FiniteRange(click.FloatRange):
    """click's FloatRange, refusing NaN and infinities: every comparison with NaN is false, so FloatRange lets it
    through its bounds (`--llm-timeout nan` reached the HTTP client; `measure --budget-s nan` wrote NaN into a
    JSON profile)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        out = super().convert(value, param, ctx)
        if out != out or out in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return out


class Negative(Exception):
    """Raised after a negative answer has been printed: exit status 1."""


def guarded(fn: F) -> F:
    """Turn InputError into one line + exit 2, Negative into exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            click.echo(f"primus: {exc.line()}", err=True)
            sys.exit(EXIT_INPUT)
        except Negative:
            sys.exit(EXIT_NEGATIVE)
        except RecursionError:
            click.echo("primus: input nested too deeply", err=True)
            sys.exit(EXIT_INPUT)
        except BrokenPipeError:  # the reader closed the pipe (`primus ... | head`)
            exit_broken_pipe()
        except OSError as exc:  # a file or folder that cannot be read or written (permissions, disk full)
            where = one_line(str(exc.filename)) if exc.filename is not None else "file system"
            click.echo(f"primus: {where}: {one_line(exc.strerror or type(exc).__name__)}", err=True)
            sys.exit(EXIT_INPUT)
        except KeyboardInterrupt:
            click.echo("primus: interrupted", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def format_option(*choices: str, default: str = "table") -> Callable[[F], F]:
    return click.option(
        "--format", "fmt", type=click.Choice(list(choices)), default=default, show_default=True,
        help="Output format; with a machine format stdout carries only that document.",
    )


def read_job(path: str | Path, stack: str | None) -> Job:
    """A job file as every command reads it. How its `stack:` release was resolved (a release the stack
    does not describe, older than every one it does, or named by the framework's own tag) changes the
    defaults the job gets, so it is said on stderr as well as in the assumptions: a user who typed
    `primus@25.1` and got 26.1's defaults sees it without reading the assumption list."""
    from primus.job import load_job

    job = load_job(path, stack)
    say_stack_note(job.resolved_stack.note)
    return job


def say_stack_note(note: str | None) -> None:
    """How a stack release was resolved, on stderr: one definition for a job file, `--from` and `import`."""
    if note:
        echo(f"primus: note: {note}", err=True)


def stack_option(fn: F) -> F:
    """``--stack NAME[@RELEASE]``: the framework the job runs on, replacing the job file's `stack:`."""
    return click.option("--stack", "stack", default=None, metavar="NAME[@RELEASE]",
                        help="The framework and release the job runs on (replaces the job's `stack:`; "
                             "see `primus stacks list`).")(fn)
