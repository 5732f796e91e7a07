"""Config files: YAML read with the safe loader only (no tags, no objects, nothing executed),
bounded in size, depth and alias expansion, with errors that name the file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pgrad_app.errors import UserError

#: A config file larger than this is not a config (e.g. ``--config /dev/zero``).
MAX_CONFIG_BYTES = 1 << 20
#: Nesting deeper than this is not a config (and would exhaust the parser's recursion).
MAX_DEPTH = 64
#: Values (scalars, lists, mappings) a config may hold once its aliases are expanded: a few
#: aliases can name each other into billions ("billion laughs").
MAX_VALUES = 100_000


def _check_shape(text: str, where: str) -> None:
    """Refuses YAML nested deeper than :data:`MAX_DEPTH` or expanding (through aliases) to more
    than :data:`MAX_VALUES` values, before anything is built from it."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):  # events: no recursion, no objects
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise UserError(f"{where}: nested deeper than {MAX_DEPTH} levels; it is not a "
                                "pgrad config.")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    sizes: dict[int, int] = {}

    def size(node) -> int:  # expanded size; each shared (aliased) node counted once per use
        if id(node) in sizes:
            return sizes[id(node)]
        if isinstance(node, yaml.MappingNode):
            n = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            n = 1 + sum(size(v) for v in node.value)
        else:
            n = 1
        sizes[id(node)] = n
        return n

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None and size(root) > MAX_VALUES:
        raise UserError(f"{where}: its aliases expand to more than {MAX_VALUES:,} values; it is "
                        "not a pgrad config.")



def load_yaml(path: str | Path) -> dict[str, Any]:
    """Reads a YAML mapping with the safe loader; errors name the file and line.

    Raises:
      UserError: missing file, malformed YAML (with line and column), or not a mapping.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise UserError(f"config file {str(path)!r} is larger than "
                            f"{MAX_CONFIG_BYTES // 1024} KiB; it is not a pgrad config.")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"config file {str(path)!r} does not exist.") from None
    except IsADirectoryError:
        raise UserError(f"config file {str(path)!r} is a directory.") from None
    except OSError as err:
        raise UserError(f"cannot read config file {str(path)!r}: {err.strerror or err}.") from None
    except UnicodeDecodeError as err:
        raise UserError(f"config file {str(path)!r} is not UTF-8 text ({err.reason} at byte "
                        f"{err.start}).") from None
    if "\0" in text:
        raise UserError(f"config file {str(path)!r} holds NUL bytes; it is not a YAML file.")
    try:
        _check_shape(text, str(path))
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or "could not parse"
        raise UserError(f"{where}: malformed YAML: {problem}.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of key: value; got a {type(data).__name__}.")
    return data
