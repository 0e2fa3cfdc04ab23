"""Reading gRPC metadata: every key evalfleet reads is a text key, so its value is a str.

gRPC hands a metadata value over as bytes only for a binary key (a name ending in ``-bin``); the
keys read here (``authorization``, the error kind and reason, the field at fault, the instance id)
are text keys. The grpc stubs type every value as ``str | bytes``, and the trailers of a failed call
as ``_Metadatum`` records, though at runtime they are (key, value) pairs: a tuple of namedtuples
for a synchronous call, a ``grpc.aio.Metadata`` for an asyncio one. These helpers say so once.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import cast

import grpc

Metadata = Collection[tuple[str, str | bytes]]


def text_value(metadata: Metadata | None, key: str, default: str = "") -> str:
    """The value of the text key ``key`` (the last one, if sent twice), or ``default``."""
    return cast(str, dict(metadata or ()).get(key, default))  # a text key's value is a str


def trailers(error: grpc.RpcError) -> Metadata:
    """The trailing metadata of a failed call as (key, value) pairs."""
    return cast(Metadata, error.trailing_metadata() or ())  # the stubs say _Metadatum; they are pairs
