"""What every operator subcommand shares: store access, errors and exit codes, logging, output.

Exit codes (the same for every subcommand):

* ``0``: done, the check passed;
* ``1``: a check failed (an invalid record, uploads found with ``--fail-if-any``, a
  missing or unsuccessful ``_SUCCESS``) or the store could not be read (a missing
  bucket or file, access denied, no connection). A guard in a pipeline fails closed;
* ``2``: usage error (argparse's own code), including a path no filesystem can open.

Expected errors end in one line on stderr, ``magicfs: <what>: <problem>``, never a
traceback. Credentials never reach the output: storage options are logged redacted
and no error message repeats an option's value.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import fsspec

from ...filesystems.originals import EXTRAS, store_of
from ...layouts.magic import check_job_id
from ...stores.deferred import take
from ...stores.failures import Failure
from ...stores.operator_view import OperatorView
from ...stores.registry import deferred_store_for, explain, operator_view_for, store_exceptions
from ..option_values import decode_option

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: The requests at once a command's store client is sized for (a committer's default).
CLIENT_THREADS = 8

#: Every logger of the package hangs below this one.
ROOT_LOGGER = "magicfs"
#: Option names whose values are credentials (matched anywhere in the name, any case).
_SECRET_NAME = re.compile(r"secret|token|passw|credential|key|sas|signature|auth", re.I)
_REDACTED = "***"
#: Environment variables holding credentials (scrubbed from messages like option values).
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
#: Credential values this process knows of; :func:`scrub` removes them from any text.
_secrets: set[str] = set()

log = logging.getLogger("magicfs.cli")


class CliError(Exception):
    """An expected failure: printed as one line on stderr, then exit with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED):
        super().__init__(message)
        self.exit_code = exit_code


class NotFound(CliError):
    """The file (or directory) is not there; its bucket is."""


# -- options --------------------------------------------------------------------------------------


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """``--endpoint-url``, ``-o``, ``-v`` and ``--json``: accepted by every operator command."""
    store = parser.add_argument_group("store access")
    store.add_argument(
        "--endpoint-url",
        metavar="URL",
        help="S3 endpoint to talk to instead of AWS (e.g. http://127.0.0.1:9000 for MinIO); "
        "passed to the filesystem as endpoint_url",
    )
    store.add_argument(
        "-o",
        "--storage-option",
        dest="storage_options",
        metavar="KEY=VALUE",
        action="append",
        type=storage_option,
        default=[],
        help="option for the fsspec filesystem constructor (repeatable); VALUE is parsed as "
        "JSON when it can be (true, 3, {...}), else taken as a string, e.g. -o anon=true "
        '-o \'client_kwargs={"region_name": "eu-west-1"}\'. Without options s3fs uses '
        "its normal credential chain (environment, profile, instance role)",
    )
    output = parser.add_argument_group("output")
    output.add_argument(
        "--json",
        action="store_true",
        help="print one machine-readable JSON document on stdout instead of text",
    )
    output.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log what magicfs does to stderr: -v for INFO, -vv for DEBUG "
        "(credentials are never logged)",
    )


def storage_option(text: str) -> tuple[str, Any]:
    """argparse type for ``KEY=VALUE``; the value as JSON when it parses, else the string
    (refused where it looks like JSON and does not parse: :mod:`..option_values`).

    The error message never repeats ``text``: it may be a secret typed without its key.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError("expected KEY=VALUE (the value was not echoed)")
    try:
        return key.strip(), decode_option(key.strip(), value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_DURATION_PART = re.compile(r"(\d+)([dhms])")
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def duration(text: str) -> int:
    """argparse type: ``7d``, ``24h``, ``30m``, ``90s`` or sums like ``1d12h`` -> seconds.

    ``0`` alone means no age at all (every upload qualifies), as in Hadoop.
    """
    value = text.strip().lower()
    if value == "0":
        return 0
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number with a unit d, h, m or s, "
            "e.g. 24h, 30m, 7d, 90s or 1d12h"
        )
    return sum(int(number) * _UNIT_SECONDS[unit] for number, unit in parts)


# -- logging --------------------------------------------------------------------------------------


def configure_logging(verbosity: int) -> None:
    """Send the ``magicfs`` logger hierarchy to stderr: WARNING, -v INFO, -vv DEBUG.

    Only magicfs's own loggers: botocore's DEBUG output includes signed request
    headers, which are not for an operator's terminal or CI log.
    """
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_ScrubbingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger(ROOT_LOGGER)
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False


class _ScrubbingFormatter(logging.Formatter):
    """Second line of defence: no log line (tracebacks included) shows a known credential."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


def remember_secrets(options: Any) -> None:
    """Note the credential values in ``options`` and the environment, for :func:`scrub`."""
    import os

    values = [os.environ.get(name) for name in _SECRET_ENV]
    stack = [options]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if _SECRET_NAME.search(str(key)) and isinstance(value, (str, int)):
                    values.append(str(value))
                else:
                    stack.append(value)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    _secrets.update(value for value in values if value and len(value) >= 4)


def scrub(text: str) -> str:
    """``text`` with every known credential value replaced by ``***``."""
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, _REDACTED)
    return text


def redact(options: Any) -> Any:
    """``options`` with the value of every credential-like key replaced by ``***``."""
    if isinstance(options, dict):
        return {
            key: _REDACTED if _SECRET_NAME.search(str(key)) else redact(value)
            for key, value in options.items()
        }
    if isinstance(options, (list, tuple)):
        return [redact(item) for item in options]
    return options


# -- store access ---------------------------------------------------------------------------------


def open_fs(url: str, args: argparse.Namespace) -> tuple[Any, str]:
    """The fsspec filesystem for ``url`` built from the command's options, and the path in it."""
    options: dict[str, Any] = dict(args.storage_options)
    if args.endpoint_url:
        options["endpoint_url"] = args.endpoint_url
    remember_secrets(options)
    try:
        options = _client_options(url, options)
        log.debug("opening %s with storage options %s", url, redact(options))
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as e:
        extra = EXTRAS.get(fsspec.core.split_protocol(url)[0] or "")
        hint = f": pip install 'magicfs[{extra}]'" if extra else ""
        raise CliError(f"{url}: the filesystem for this URL is not installed ({e}){hint}") from None
    except (ValueError, TypeError) as e:
        raise CliError(f"{url}: cannot open: {e}", EXIT_USAGE) from None
    log.debug("%s is %s path %r", url, type(fs).__name__, path)
    return fs, path


def _client_options(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the client settings ``url``'s deferred store gives its filesystem
    when a committer builds it (S3: timeouts and retries that fail fast on a wrong or
    dead endpoint): asked of the registry by the URL's filesystem class, none built."""
    spec = deferred_store_for(store_of(url)) if fsspec.core.split_protocol(url)[0] else None
    if spec is None or spec.options is None:
        return options
    return spec.options().filesystem_options(options, CLIENT_THREADS)


def job_id_argument(text: str) -> str:
    """``--job ID``'s type: a valid job id (:func:`~magicfs.layouts.magic.check_job_id`),
    else argparse's usage error (exit 2) with the id's rule."""
    try:
        return check_job_id(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@contextmanager
def store_errors(url: str) -> Iterator[None]:
    """Turn the store's errors into one-line :class:`CliError` messages about ``url``
    (read the store's own way: :func:`~magicfs.stores.registry.explain`)."""
    from ...errors import StoreCallError

    raised = store_exceptions()
    try:
        yield
    except CliError:
        raise
    except OSError as e:
        failure = explain(e)
        if failure is not None and failure.missing_bucket:  # s3fs: FileNotFoundError
            raise CliError(f"{url}: no such bucket") from None
        if isinstance(e, FileNotFoundError):
            raise NotFound(f"{url}: no such file or directory") from None
        if isinstance(e, PermissionError):
            raise CliError(f"{url}: access denied: {_denial(e, failure)}") from None
        if isinstance(e, IsADirectoryError):
            raise CliError(f"{url}: is a directory, not a file") from None
        code = failure.code if failure is not None else None
        if isinstance(e, StoreCallError) or code is None:  # names its answer (or has none)
            raise CliError(f"{url}: {e}") from None
        raise CliError(f"{url}: {code}: {e}") from None
    except raised as e:  # no credentials, no connection, bad endpoint ...
        failure = explain(e)
        if failure is not None and failure.not_connected:
            raise CliError(f"{url}: {failure.answer}") from None
        raise CliError(f"{url}: {e}") from None


def _denial(error: PermissionError, failure: Failure | None) -> str:
    """The store's own words for a refusal (its code and message), and what to check."""
    if failure is None or not failure.answered:
        return f"{error}; check this user's permissions on the path"
    return (
        f"{failure.answer}; check the credentials (-o key=... or the profile in use) and "
        "that their policy allows this action on the path"
    )


def read_limited(fs: Any, path: str, limit: int, url: str) -> bytes:
    """The whole file, refusing one larger than ``limit`` bytes before reading it.

    Asks for the size first (one HEAD on S3): a ranged GET of a zero-byte S3 object
    fails with InvalidRange, and a zero-byte ``_SUCCESS`` must be reported as such.
    """
    with store_errors(url):
        view = operator_view_for(fs)
        if view is not None and view.paced_reads:
            return _read_paced(view, path, limit, url)
        info = fs.info(path)
        if info.get("type") == "directory":
            raise CliError(f"{url}: is a directory, not a file")
        size = info.get("size") or 0
        if size > limit:
            raise CliError(f"{url}: {size:,} bytes is larger than any commit record ({limit:,})")
        return fs.cat_file(path) if size else b""


def _read_paced(view: OperatorView, path: str, limit: int, url: str) -> bytes:
    """:func:`read_limited` through the store's adapter (S3: HEAD, then a ranged GET),
    retried and paced as a committer's calls are, where the filesystem's ``info`` is not."""
    adapter = view.adapter
    _, key = view.split(path)
    info = view.run(adapter.arecord_info(path)) if key else None
    if info is None:
        if view.run(take(adapter.alist_records(path), 1)):
            raise CliError(f"{url}: is a directory, not a file")
        raise FileNotFoundError(path)
    size = int(info.get("size") or 0)
    if size > limit:
        raise CliError(f"{url}: {size:,} bytes is larger than any commit record ({limit:,})")
    data = view.run(adapter.aread_record(path, limit)) if size else b""
    if data is None:
        raise FileNotFoundError(path)
    return data


# -- output ---------------------------------------------------------------------------------------


def print_json(document: Any) -> None:
    json.dump(document, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


class JsonObjectWriter:
    """One JSON object written member by member, byte for byte as :func:`print_json`
    would write the whole object; one member at a time may be an array written element
    by element (:meth:`begin_array`, :meth:`element`, :meth:`end_array`), so a document
    with a million elements never has to be in memory.

    The output is one valid JSON document only after :meth:`close`: a command that
    fails midway leaves it unterminated, so no reader mistakes it for a complete one.
    """

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self._members = 0
        #: Elements written to the open array; ``None``: no array is open.
        self._elements: int | None = None
        self.out.write("{")

    def member(self, name: str, value: Any) -> None:
        self._name(name)
        self.out.write(_json_text(value, "  "))

    def begin_array(self, name: str) -> None:
        self._name(name)
        self.out.write("[")
        self._elements = 0

    def element(self, value: Any) -> None:
        if self._elements is None:
            raise ValueError("no array is open")
        self.out.write(f"{',' if self._elements else ''}\n    {_json_text(value, '    ')}")
        self._elements += 1

    def end_array(self) -> None:
        if self._elements is None:
            raise ValueError("no array is open")
        self.out.write("\n  ]" if self._elements else "]")
        self._elements = None

    def close(self) -> None:
        self.out.write("\n}\n" if self._members else "}\n")

    def _name(self, name: str) -> None:
        if self._elements is not None:
            raise ValueError("an array is open")
        self.out.write(f"{',' if self._members else ''}\n  {_json_text(name, '')}: ")
        self._members += 1


def _json_text(value: Any, indent: str) -> str:
    """``value`` as :func:`print_json` writes it, nested ``indent`` deep (no trailing newline)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return text.replace("\n", "\n" + indent)  # JSON strings hold no raw newline


def non_negative(text: str) -> int:
    """argparse type: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {text!r}")
    return value


def human_bytes(count: int) -> str:
    """``143424`` -> ``143,424 bytes (140.1 KiB)``; small counts without the unit part."""
    text = f"{count:,} byte{'' if count == 1 else 's'}"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return text if count < 1024 else f"{text} ({value:.1f} {unit})"
    return text


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def fields(pairs: list[tuple[str, Any]], indent: str = "") -> list[str]:
    """Aligned ``label: value`` lines; pairs whose value is ``None`` or ``""`` are left out.

    Aligned on every label, shown or not, so one kind of record always looks the same.
    """
    shown = [(label, value) for label, value in pairs if value not in (None, "")]
    width = max((len(label) for label, _ in pairs), default=0) + 1
    return [f"{indent}{label + ':':<{width}} {value}" for label, value in shown]


def first(items: list[Any], limit: int) -> tuple[list[Any], str]:
    """The items to print (``limit`` 0 = all) and a heading suffix like ``(first 20 of 75)``."""
    if limit and len(items) > limit:
        return items[:limit], f"(first {limit:,} of {len(items):,}; --limit 0 shows all)"
    return items, f"({len(items):,})"
