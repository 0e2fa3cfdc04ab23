"""The library every evalfleet service and user shares: the wire contract and how to speak it.

- `evalfleet.v1`: Python generated from `protos/evalfleet/v1/*.proto` (`make protos`); never edited.
- `evalfleet.scheduler_api`, `evalfleet.policy_api`: the clients of the two servers, the typed
  errors both sides raise, and the pure functions of the wire messages both sides compute.
- `evalfleet.auth`, `evalfleet.channels`, `evalfleet.wire`: bearer tokens, client channels and
  server-side request parsing, shared by both servers and every client.
- `evalfleet.processes`, `evalfleet.local_fleet`: the process harness (one child process: start,
  wait, stop) and, on it, a whole fleet on one machine.

Nothing here imports a service package (`scheduler`, `inference_server`, `renderer_worker`): a
renderer worker or a user script loads no server code (import-linter holds this in CI).
"""
