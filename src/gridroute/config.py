"""One loader and one `ConfigError` for every config file gridroute reads.

Gateway, operator and scenario files (and overlay and control files as they come)
are each one pydantic model; this module is the only place that reads a file,
parses YAML and turns a `ValidationError` into words, so every kind fails the same
way: one line per problem, `file: field: reason (got value)`, and the processes exit
with status 2 instead of a traceback.

It imports no process package (only pydantic and yaml), so `core/`-free layers such
as `sim/` can use it without reaching a socket.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

SHOWN_VALUE_CHARS = 80
"""A value quoted in an error is cut to this many characters."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a file: where (a dotted field path) and why."""

    field: str
    reason: str


class ConfigError(ValueError):
    """A config file that cannot be used; every problem names the file and the field.

    `file`, `field` and `reason` are those of the first problem, for callers that
    show one line; `str()` is every problem, one per line.
    """

    def __init__(self, file: str, problems: Sequence[Problem]) -> None:
        if not problems:
            problems = [Problem("(file)", "unusable")]
        self.file = file
        self.problems = tuple(problems)
        self.field = self.problems[0].field
        self.reason = self.problems[0].reason
        super().__init__("\n".join(f"{file}: {p.field}: {p.reason}" for p in self.problems))

    @classmethod
    def one(cls, file: str, field: str, reason: str) -> ConfigError:
        return cls(file, [Problem(field, reason)])


def read_text(path: str | Path, field: str = "(file)") -> str:
    """A file's text; a missing or unreadable file is a `ConfigError` naming it.

    `field` names the config field that pointed at the file, when there is one, so
    "tls.ca_file: cannot read /x/ca.pem: No such file or directory" says what to fix.
    """
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError.one(str(p), field, "no such file") from None
    except IsADirectoryError:
        raise ConfigError.one(str(p), field, "is a directory, not a file") from None
    except PermissionError:
        raise ConfigError.one(str(p), field, "permission denied") from None
    except UnicodeDecodeError:
        raise ConfigError.one(str(p), field, "not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError.one(str(p), field, f"cannot read: {exc.strerror or exc}") from None


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    """YAML text -> the top-level mapping (an empty file is an empty mapping)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(yaml)"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError.one(source, where, f"invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError.one(
            source, "(top level)", f"expected a mapping, got {type(data).__name__}"
        )
    return data


def read_mapping(path: str | Path) -> dict[str, Any]:
    """Read and parse a YAML file into its top-level mapping."""
    return parse_yaml(read_text(path), str(path))


def validate(model: type[M], data: Any, source: str) -> M:
    """Validate loaded data into `model`; every pydantic error becomes a `Problem`."""
    if not isinstance(data, Mapping):
        raise ConfigError.one(
            source, "(top level)", f"expected a mapping, got {type(data).__name__}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, describe(exc)) from None


def load(
    path: str | Path, model: type[M], prepare: Callable[[dict[str, Any]], Any] | None = None
) -> M:
    """Read, parse and validate one file; `prepare` may rewrite the mapping first."""
    data = read_mapping(path)
    if prepare is not None:
        data = prepare(data)
    return validate(model, data, str(path))


_LEAD = re.compile(r"^([A-Za-z_][\w.\[\]-]*): ")


def describe(exc: ValidationError) -> list[Problem]:
    """Pydantic's errors as problems: dotted field path, message, the value it got.

    A cross-field check (no location) names its field at the start of its message
    ("sites: duplicate ..."); that field is lifted out so every line reads alike.
    """
    problems = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if not loc:
            m = _LEAD.match(msg)
            if m:
                loc, msg = m.group(1), msg[m.end() :]
            else:
                loc = "(top level)"
        elif err["type"] != "missing" and "input" in err:
            value = err["input"]
            if not isinstance(value, dict | list):
                msg += f" (got {repr(value)[:SHOWN_VALUE_CHARS]})"
        problems.append(Problem(loc, msg))
    return problems


_LABEL = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
MAX_PORT = 65535


def split_listen(value: str) -> tuple[str, int]:
    """`host:port` -> (host, port); IPv6 hosts in brackets (`[::1]:8080` -> `::1`).

    Port 0 asks the system for a free port. Raises `ValueError` with a message that
    says what is wrong and what a good value looks like, so the one validator of every
    listen field (`ListenAddress`) and the code that binds read it the same way.
    """
    example = "e.g. 127.0.0.1:8080, 0.0.0.0:9443 or [::1]:8080"
    host, sep, port = value.rpartition(":")
    if not sep:
        raise ValueError(f"must be host:port, {example}")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(f"unclosed [ in an IPv6 host, {example}")
        inner = host[1:-1]
        try:
            ipaddress.IPv6Address(inner)
        except ValueError:
            raise ValueError(f"not an IPv6 address in brackets: {inner!r}") from None
        host = inner
    elif ":" in host:
        raise ValueError(f"an IPv6 host goes in brackets, e.g. [{host}]:{port or 8080}")
    elif not host:
        raise ValueError(f"the host is empty (0.0.0.0 for every interface), {example}")
    elif len(host) > 253 or not all(_LABEL.match(p) for p in host.removesuffix(".").split(".")):
        raise ValueError(f"not a host name or address: {host!r}")
    if not port.isascii() or not port.isdigit():
        raise ValueError(f"the port must be a number 0-{MAX_PORT}, got {port!r}")
    number = int(port)
    if number > MAX_PORT:
        raise ValueError(f"the port must be 0-{MAX_PORT} (0: any free port), got {number}")
    return host, number


def _check_listen(value: str) -> str:
    split_listen(value)
    return value


ListenAddress = Annotated[str, AfterValidator(_check_listen)]
"""A `host:port` to listen on (port 0: any free port); the type of every listen field."""


def check_files(source: str, files: Mapping[str, str | Path | None]) -> None:
    """Every file a config names (field -> path) exists and is readable.

    Run at start-up and by `gridroute config check`, so a process started from the
    wrong directory says which field and which path, instead of a traceback.
    """
    problems = []
    for field, path in files.items():
        if path is None:
            continue
        try:
            with Path(path).open("rb"):
                pass
        except FileNotFoundError:
            problems.append(Problem(field, f"no such file: {_shown(path)}"))
            continue
        except IsADirectoryError:
            problems.append(Problem(field, f"is a directory, not a file: {path}"))
            continue
        except OSError as exc:
            problems.append(Problem(field, f"cannot read {path}: {exc.strerror or exc}"))
            continue
        except ValueError:  # an embedded NUL byte: no system call takes it
            problems.append(Problem(field, f"not a file path (got {_quoted(path)})"))
            continue
    if problems:
        raise ConfigError(source, problems)


def check_paths(source: str, files: Mapping[str, str | Path | None]) -> None:
    """Every file a config names (field -> path) is shaped like a file's path, without
    opening it: what `gridroute config check --offline` runs instead of `check_files`
    for a config written for another machine (its `/etc/...` files are not here).

    A path is refused when it is empty (or only `.`/`..`), ends in a separator (a
    directory), or holds a control character (a NUL byte, a newline from a bad paste).
    """
    problems = []
    for field, path in files.items():
        if path is None:
            continue
        text = str(path)
        if text.strip() in ("", ".", ".."):
            problems.append(Problem(field, f"not a file path: empty (got {_quoted(path)})"))
        elif text.endswith(("/", os.sep)):
            problems.append(Problem(field, f"names a directory, not a file (got {_quoted(path)})"))
        elif any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
            problems.append(
                Problem(field, f"not a file path: a control character (got {_quoted(path)})")
            )
    if problems:
        raise ConfigError(source, problems)


def _quoted(path: str | Path) -> str:
    return repr(str(path))[:SHOWN_VALUE_CHARS]


def _shown(path: str | Path) -> str:
    """A path as an error shows it: a relative one with the directory it is relative to
    (the usual mistake is starting a process from another directory)."""
    if Path(path).is_absolute():
        return str(path)
    return f"{path} (relative to the working directory {os.getcwd()})"
