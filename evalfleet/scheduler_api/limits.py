"""Size limits shared by the scheduler server and its clients."""

MAX_MANIFEST_BYTES = 64 * 1024 * 1024
# gRPC's default 4 MiB receive limit is below a large manifest; both sides raise it to this.
MESSAGE_LIMIT = MAX_MANIFEST_BYTES + 1024 * 1024
MAX_TEXT_BYTES = 64 * 1024
# One chunk of an artifact upload or download: well under the message limit.
ARTIFACT_CHUNK_BYTES = 1024 * 1024
