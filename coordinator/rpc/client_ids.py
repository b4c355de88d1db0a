"""Client ids: the alphabet a new id must use, and the wider one older ids keep.

A client id names spool files, co-located update files ('<client_id>.<random>.f32'), rows and
log lines. A new id (generated, enrolled, or first seen at an open-auth Join) is 1-64 characters
of letters, digits, '_' and '-', starting with a letter or digit; no '.', so no id is a prefix of
another's file names. Ids that an earlier version enrolled or registered with '.' keep working,
and the co-located file check matches them exactly (`owns_file`), never by prefix alone.
"""

from __future__ import annotations

import re

from fedort.common.errors import ProtocolError

NEW_CLIENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
CLIENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")  # what older versions accepted (still accepted for known ids)
_FILE_TAIL = re.compile(r"[A-Za-z0-9_-]{1,128}\.f32")


def check_new_client_id(client_id: str) -> None:
    """ProtocolError (INVALID_ARGUMENT) unless `client_id` uses the new-id alphabet."""
    if not NEW_CLIENT_ID.match(client_id):
        raise ProtocolError(
            f"a new client_id must match {NEW_CLIENT_ID.pattern} (letters, digits, '_', '-'), got {client_id[:80]!r}"
        )


def owns_file(client_id: str, name: str) -> bool:
    """`name` is '<client_id>.<tail>.f32' with a tail free of '.': client 'a' does not own 'a.b.<tail>.f32'."""
    prefix = f"{client_id}."
    return name.startswith(prefix) and bool(_FILE_TAIL.fullmatch(name[len(prefix) :]))


__all__ = ["CLIENT_ID", "NEW_CLIENT_ID", "check_new_client_id", "owns_file"]
