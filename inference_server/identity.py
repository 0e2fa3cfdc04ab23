"""The identity record of a verified checkpoint as served by a loaded backend.

What decides a policy's answers (every file's hash, the backend and its settings, precision, the
observation and action contract) goes into the record; its digest and comparison are the wire's
(`evalfleet.policy_api.identity`), so a client computes the same digest as the server.
"""

from __future__ import annotations

from evalfleet.policy_api.identity import PROTOCOL_VERSION, canonical_json
from evalfleet.v1 import policy_pb2
from inference_server.backends import Backend
from inference_server.checkpoint import CONFIG_NAME, INDEX_NAME, NORMALIZATION_NAME, Checkpoint


def build(checkpoint: Checkpoint, backend_name: str, backend: Backend) -> policy_pb2.IdentityRecord:
    """The record of a verified checkpoint as served by a loaded backend."""
    return policy_pb2.IdentityRecord(
        epoch=checkpoint.name,
        backend=backend_name,
        backend_settings_json=canonical_json(checkpoint.settings),
        shard_sha256=checkpoint.shards,
        index_sha256=checkpoint.file_hash(INDEX_NAME),
        config_sha256=checkpoint.file_hash(CONFIG_NAME),
        normalization_sha256=checkpoint.file_hash(NORMALIZATION_NAME),
        precision=backend.precision,
        action_dim=backend.action_dim,
        chunk_length=backend.chunk_length,
        cameras=list(backend.cameras),
        state=list(backend.state),
        protocol_version=PROTOCOL_VERSION,
        other_sha256=checkpoint.others,
    )
