"""Domain-separation labels: the JSON arrays that bind a derived key, an AEAD's associated data or a
commitment to its round, purpose and members (e.g. ["fedort-secagg", round id, purpose, id, id]).

Every side of the protocol (this package, the coordinator, the TypeScript client) must produce the same
bytes, so the format is fixed: what `json.dumps` writes by default. A device builds hundreds of them
per round, so strings and integers are formatted here directly; any other item goes through `json.dumps`.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii


def label(*items: str | int) -> bytes:
    """json.dumps(list(items)).encode(), byte for byte."""
    parts = []
    for item in items:
        if isinstance(item, str):
            parts.append(encode_basestring_ascii(item))
        elif isinstance(item, int) and not isinstance(item, bool):
            parts.append(int.__repr__(item))  # what json writes for an int (and an int subclass)
        else:  # bool, float, None: json's own rules
            parts.append(json.dumps(item))
    return ("[" + ", ".join(parts) + "]").encode()


__all__ = ["label"]
