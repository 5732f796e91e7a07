"""Config files: YAML read with the safe loader only (no tags, no objects, nothing executed),
bounded in size, with errors that name the file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pgrad_app.errors import UserError

#: A config file larger than this is not a config (e.g. ``--config /dev/zero``).
MAX_CONFIG_BYTES = 1 << 20



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
