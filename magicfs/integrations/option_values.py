"""Store options typed as text (Spark's ``.option(...)``, the CLI's ``-o KEY=VALUE``).

Both decode a value as JSON when it parses (``true``, ``8``, ``{"region_name": "x"}``)
and keep it as a string otherwise (``http://127.0.0.1:9000``). Two kinds of text would
otherwise reach the store's filesystem constructor as a string and fail there with an
error that names neither the option nor the cause (``'str' object has no attribute
'copy'``): text that starts like a JSON object or list but does not parse, and any
text for an option whose name says it is a mapping (``client_kwargs``,
``config_kwargs``, ``s3_additional_kwargs``: fsspec's and s3fs's ``*_kwargs``). Both
are refused here, naming the option and the parse error. Values are never echoed:
they may be secrets.
"""

from __future__ import annotations

import json
from typing import Any


def decode_option(name: str, text: str) -> Any:
    """``text`` as JSON where it parses, else the string; ``ValueError`` as above.

    ``name`` is how the user typed the option (``storage_options.client_kwargs``), for
    the message; its last dotted element decides whether a mapping is required.
    """
    try:
        value: Any = json.loads(text)
    except ValueError as e:
        if text.lstrip()[:1] in ("{", "[") or _wants_mapping(name):
            raise ValueError(
                f"option {name} is not valid JSON ({e}): give a JSON object, e.g. "
                '{"region_name": "eu-west-1"} (double quotes, true/false/null, no '
                f"trailing comma), or one option per key: {name}.<key>"
            ) from None
        return text
    if _wants_mapping(name) and not isinstance(value, dict):
        raise ValueError(
            f"option {name} must be a JSON object ({{...}}), not a {type(value).__name__}: "
            f"give a JSON object, or one option per key: {name}.<key>"
        )
    return value


def _wants_mapping(name: str) -> bool:
    return name.rsplit(".", 1)[-1].lower().endswith("_kwargs")
