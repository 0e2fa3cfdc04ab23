from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_PENDING: _ClassVar[TaskState]
    TASK_STATE_LEASED: _ClassVar[TaskState]
    TASK_STATE_SUCCEEDED: _ClassVar[TaskState]
    TASK_STATE_FAILED: _ClassVar[TaskState]
    TASK_STATE_CANCELLED: _ClassVar[TaskState]

class FailureReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_REASON_UNSPECIFIED: _ClassVar[FailureReason]
    FAILURE_REASON_SIMULATOR_CRASH: _ClassVar[FailureReason]
    FAILURE_REASON_POLICY_UNAVAILABLE: _ClassVar[FailureReason]
    FAILURE_REASON_POLICY_RESTARTED: _ClassVar[FailureReason]
    FAILURE_REASON_POLICY_ERROR: _ClassVar[FailureReason]
    FAILURE_REASON_IDENTITY_MISMATCH: _ClassVar[FailureReason]
    FAILURE_REASON_TIMEOUT: _ClassVar[FailureReason]
    FAILURE_REASON_BENCHMARK_ERROR: _ClassVar[FailureReason]
    FAILURE_REASON_LEASE_EXPIRED: _ClassVar[FailureReason]

class ErrorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_KIND_UNSPECIFIED: _ClassVar[ErrorKind]
    ERROR_KIND_INVALID_ARGUMENT: _ClassVar[ErrorKind]
    ERROR_KIND_NOT_FOUND: _ClassVar[ErrorKind]
    ERROR_KIND_CONFLICT: _ClassVar[ErrorKind]
    ERROR_KIND_STALE_LEASE: _ClassVar[ErrorKind]
    ERROR_KIND_PRECONDITION_FAILED: _ClassVar[ErrorKind]
    ERROR_KIND_UNAUTHENTICATED: _ClassVar[ErrorKind]
    ERROR_KIND_UNAVAILABLE: _ClassVar[ErrorKind]
    ERROR_KIND_RESOURCE_EXHAUSTED: _ClassVar[ErrorKind]
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_PENDING: TaskState
TASK_STATE_LEASED: TaskState
TASK_STATE_SUCCEEDED: TaskState
TASK_STATE_FAILED: TaskState
TASK_STATE_CANCELLED: TaskState
FAILURE_REASON_UNSPECIFIED: FailureReason
FAILURE_REASON_SIMULATOR_CRASH: FailureReason
FAILURE_REASON_POLICY_UNAVAILABLE: FailureReason
FAILURE_REASON_POLICY_RESTARTED: FailureReason
FAILURE_REASON_POLICY_ERROR: FailureReason
FAILURE_REASON_IDENTITY_MISMATCH: FailureReason
FAILURE_REASON_TIMEOUT: FailureReason
FAILURE_REASON_BENCHMARK_ERROR: FailureReason
FAILURE_REASON_LEASE_EXPIRED: FailureReason
ERROR_KIND_UNSPECIFIED: ErrorKind
ERROR_KIND_INVALID_ARGUMENT: ErrorKind
ERROR_KIND_NOT_FOUND: ErrorKind
ERROR_KIND_CONFLICT: ErrorKind
ERROR_KIND_STALE_LEASE: ErrorKind
ERROR_KIND_PRECONDITION_FAILED: ErrorKind
ERROR_KIND_UNAUTHENTICATED: ErrorKind
ERROR_KIND_UNAVAILABLE: ErrorKind
ERROR_KIND_RESOURCE_EXHAUSTED: ErrorKind

class PutManifestRequest(_message.Message):
    __slots__ = ("body", "expected_hash")
    BODY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_HASH_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    expected_hash: str
    def __init__(self, body: _Optional[bytes] = ..., expected_hash: _Optional[str] = ...) -> None: ...

class PutManifestResponse(_message.Message):
    __slots__ = ("hash", "created")
    HASH_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    hash: str
    created: bool
    def __init__(self, hash: _Optional[str] = ..., created: _Optional[bool] = ...) -> None: ...

class GetManifestRequest(_message.Message):
    __slots__ = ("hash",)
    HASH_FIELD_NUMBER: _ClassVar[int]
    hash: str
    def __init__(self, hash: _Optional[str] = ...) -> None: ...

class GetManifestResponse(_message.Message):
    __slots__ = ("hash", "body")
    HASH_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    hash: str
    body: bytes
    def __init__(self, hash: _Optional[str] = ..., body: _Optional[bytes] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("submission_id", "manifest_hashes", "route", "batch_size", "max_attempts", "priority", "checkpoint", "labels_json", "execute_steps", "spec_json", "canary", "sequential", "max_leased_tasks")
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_HASHES_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LABELS_JSON_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_STEPS_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    CANARY_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASED_TASKS_FIELD_NUMBER: _ClassVar[int]
    submission_id: str
    manifest_hashes: _containers.RepeatedScalarFieldContainer[str]
    route: str
    batch_size: int
    max_attempts: int
    priority: int
    checkpoint: str
    labels_json: str
    execute_steps: int
    spec_json: str
    canary: CanarySettings
    sequential: SequentialSettings
    max_leased_tasks: int
    def __init__(self, submission_id: _Optional[str] = ..., manifest_hashes: _Optional[_Iterable[str]] = ..., route: _Optional[str] = ..., batch_size: _Optional[int] = ..., max_attempts: _Optional[int] = ..., priority: _Optional[int] = ..., checkpoint: _Optional[str] = ..., labels_json: _Optional[str] = ..., execute_steps: _Optional[int] = ..., spec_json: _Optional[str] = ..., canary: _Optional[_Union[CanarySettings, _Mapping]] = ..., sequential: _Optional[_Union[SequentialSettings, _Mapping]] = ..., max_leased_tasks: _Optional[int] = ...) -> None: ...

class SequentialSettings(_message.Message):
    __slots__ = ("seed", "threshold", "precision", "paired_with", "margin", "cancel_leased")
    SEED_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    PAIRED_WITH_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_LEASED_FIELD_NUMBER: _ClassVar[int]
    seed: int
    threshold: float
    precision: float
    paired_with: str
    margin: float
    cancel_leased: bool
    def __init__(self, seed: _Optional[int] = ..., threshold: _Optional[float] = ..., precision: _Optional[float] = ..., paired_with: _Optional[str] = ..., margin: _Optional[float] = ..., cancel_leased: _Optional[bool] = ...) -> None: ...

class SequentialState(_message.Message):
    __slots__ = ("settings", "prefix_tasks", "prefix_episodes", "tasks_total", "episodes_total", "successes", "low", "high", "a_only", "b_only", "e_value", "p_value", "verdict", "words", "stopped_at", "cancelled_tasks", "blocked", "compared_by")
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_TASKS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_EPISODES_FIELD_NUMBER: _ClassVar[int]
    TASKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EPISODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SUCCESSES_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    A_ONLY_FIELD_NUMBER: _ClassVar[int]
    B_ONLY_FIELD_NUMBER: _ClassVar[int]
    E_VALUE_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    STOPPED_AT_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_TASKS_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    COMPARED_BY_FIELD_NUMBER: _ClassVar[int]
    settings: SequentialSettings
    prefix_tasks: int
    prefix_episodes: int
    tasks_total: int
    episodes_total: int
    successes: int
    low: float
    high: float
    a_only: int
    b_only: int
    e_value: float
    p_value: float
    verdict: str
    words: str
    stopped_at: float
    cancelled_tasks: int
    blocked: str
    compared_by: str
    def __init__(self, settings: _Optional[_Union[SequentialSettings, _Mapping]] = ..., prefix_tasks: _Optional[int] = ..., prefix_episodes: _Optional[int] = ..., tasks_total: _Optional[int] = ..., episodes_total: _Optional[int] = ..., successes: _Optional[int] = ..., low: _Optional[float] = ..., high: _Optional[float] = ..., a_only: _Optional[int] = ..., b_only: _Optional[int] = ..., e_value: _Optional[float] = ..., p_value: _Optional[float] = ..., verdict: _Optional[str] = ..., words: _Optional[str] = ..., stopped_at: _Optional[float] = ..., cancelled_tasks: _Optional[int] = ..., blocked: _Optional[str] = ..., compared_by: _Optional[str] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("submission_id", "tasks_created", "tasks_total", "episodes_total")
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_CREATED_FIELD_NUMBER: _ClassVar[int]
    TASKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EPISODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    submission_id: str
    tasks_created: int
    tasks_total: int
    episodes_total: int
    def __init__(self, submission_id: _Optional[str] = ..., tasks_created: _Optional[int] = ..., tasks_total: _Optional[int] = ..., episodes_total: _Optional[int] = ...) -> None: ...

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("worker_id", "host", "gpu_uuid", "routes", "versions_json", "stacks")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    STACKS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    host: str
    gpu_uuid: str
    routes: _containers.RepeatedScalarFieldContainer[str]
    versions_json: str
    stacks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, worker_id: _Optional[str] = ..., host: _Optional[str] = ..., gpu_uuid: _Optional[str] = ..., routes: _Optional[_Iterable[str]] = ..., versions_json: _Optional[str] = ..., stacks: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterWorkerResponse(_message.Message):
    __slots__ = ("scheduler_instance_id", "lease_seconds")
    SCHEDULER_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    scheduler_instance_id: str
    lease_seconds: float
    def __init__(self, scheduler_instance_id: _Optional[str] = ..., lease_seconds: _Optional[float] = ...) -> None: ...

class ClaimRequest(_message.Message):
    __slots__ = ("worker_id", "routes", "checkpoints", "stacks")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    STACKS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    routes: _containers.RepeatedScalarFieldContainer[str]
    checkpoints: _containers.RepeatedScalarFieldContainer[str]
    stacks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, worker_id: _Optional[str] = ..., routes: _Optional[_Iterable[str]] = ..., checkpoints: _Optional[_Iterable[str]] = ..., stacks: _Optional[_Iterable[str]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("task_id", "submission_id", "attempt", "fencing_token", "deadline", "manifest_hash", "episodes", "route", "checkpoint", "lease_seconds", "execute_steps")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_HASH_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_STEPS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    submission_id: str
    attempt: int
    fencing_token: int
    deadline: float
    manifest_hash: str
    episodes: _containers.RepeatedScalarFieldContainer[int]
    route: str
    checkpoint: str
    lease_seconds: float
    execute_steps: int
    def __init__(self, task_id: _Optional[str] = ..., submission_id: _Optional[str] = ..., attempt: _Optional[int] = ..., fencing_token: _Optional[int] = ..., deadline: _Optional[float] = ..., manifest_hash: _Optional[str] = ..., episodes: _Optional[_Iterable[int]] = ..., route: _Optional[str] = ..., checkpoint: _Optional[str] = ..., lease_seconds: _Optional[float] = ..., execute_steps: _Optional[int] = ...) -> None: ...

class ClaimResponse(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ("task_id", "fencing_token")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    fencing_token: int
    def __init__(self, task_id: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("lease", "worker_id")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    worker_id: str
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., worker_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("deadline", "cancelled")
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    deadline: float
    cancelled: bool
    def __init__(self, deadline: _Optional[float] = ..., cancelled: _Optional[bool] = ...) -> None: ...

class EpisodeResult(_message.Message):
    __slots__ = ("episode_index", "success", "steps", "wall_seconds", "trace_digest", "info_json", "execute_steps", "remote", "health")
    EPISODE_INDEX_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TRACE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_STEPS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    episode_index: int
    success: bool
    steps: int
    wall_seconds: float
    trace_digest: str
    info_json: str
    execute_steps: int
    remote: RemotePolicy
    health: EpisodeHealth
    def __init__(self, episode_index: _Optional[int] = ..., success: _Optional[bool] = ..., steps: _Optional[int] = ..., wall_seconds: _Optional[float] = ..., trace_digest: _Optional[str] = ..., info_json: _Optional[str] = ..., execute_steps: _Optional[int] = ..., remote: _Optional[_Union[RemotePolicy, _Mapping]] = ..., health: _Optional[_Union[EpisodeHealth, _Mapping]] = ...) -> None: ...

class EpisodeHealth(_message.Message):
    __slots__ = ("max_steps", "action_std_max", "action_saturated_fraction", "state_range_max", "frozen_cameras", "actions_executed", "action_outside_range_fraction")
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    ACTION_STD_MAX_FIELD_NUMBER: _ClassVar[int]
    ACTION_SATURATED_FRACTION_FIELD_NUMBER: _ClassVar[int]
    STATE_RANGE_MAX_FIELD_NUMBER: _ClassVar[int]
    FROZEN_CAMERAS_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_EXECUTED_FIELD_NUMBER: _ClassVar[int]
    ACTION_OUTSIDE_RANGE_FRACTION_FIELD_NUMBER: _ClassVar[int]
    max_steps: int
    action_std_max: float
    action_saturated_fraction: float
    state_range_max: float
    frozen_cameras: _containers.RepeatedScalarFieldContainer[str]
    actions_executed: int
    action_outside_range_fraction: float
    def __init__(self, max_steps: _Optional[int] = ..., action_std_max: _Optional[float] = ..., action_saturated_fraction: _Optional[float] = ..., state_range_max: _Optional[float] = ..., frozen_cameras: _Optional[_Iterable[str]] = ..., actions_executed: _Optional[int] = ..., action_outside_range_fraction: _Optional[float] = ...) -> None: ...

class RemotePolicy(_message.Message):
    __slots__ = ("dialect", "url", "handshake_sha256", "sealed")
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    HANDSHAKE_SHA256_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    dialect: str
    url: str
    handshake_sha256: str
    sealed: bool
    def __init__(self, dialect: _Optional[str] = ..., url: _Optional[str] = ..., handshake_sha256: _Optional[str] = ..., sealed: _Optional[bool] = ...) -> None: ...

class ReportEpisodeRequest(_message.Message):
    __slots__ = ("lease", "result")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    result: EpisodeResult
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., result: _Optional[_Union[EpisodeResult, _Mapping]] = ...) -> None: ...

class ReportEpisodeResponse(_message.Message):
    __slots__ = ("duplicate",)
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    def __init__(self, duplicate: _Optional[bool] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("lease", "result_json", "results", "claim_next")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    CLAIM_NEXT_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    result_json: str
    results: _containers.RepeatedCompositeFieldContainer[EpisodeResult]
    claim_next: ClaimRequest
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., result_json: _Optional[str] = ..., results: _Optional[_Iterable[_Union[EpisodeResult, _Mapping]]] = ..., claim_next: _Optional[_Union[ClaimRequest, _Mapping]] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ("next",)
    NEXT_FIELD_NUMBER: _ClassVar[int]
    next: Lease
    def __init__(self, next: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class FailRequest(_message.Message):
    __slots__ = ("lease", "error", "retryable", "reason")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    error: str
    retryable: bool
    reason: FailureReason
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., error: _Optional[str] = ..., retryable: _Optional[bool] = ..., reason: _Optional[_Union[FailureReason, str]] = ...) -> None: ...

class FailResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: TaskState
    def __init__(self, state: _Optional[_Union[TaskState, str]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("lease", "reason")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    reason: str
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StateCounts(_message.Message):
    __slots__ = ("pending", "leased", "succeeded", "failed", "cancelled", "total")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    pending: int
    leased: int
    succeeded: int
    failed: int
    cancelled: int
    total: int
    def __init__(self, pending: _Optional[int] = ..., leased: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class SubmissionStatus(_message.Message):
    __slots__ = ("submission_id", "route", "priority", "checkpoint", "created_at", "tasks", "episodes_planned", "episodes_completed", "episodes_succeeded", "spec_json", "canary", "paused", "sequential", "max_leased_tasks")
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    EPISODES_PLANNED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    CANARY_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASED_TASKS_FIELD_NUMBER: _ClassVar[int]
    submission_id: str
    route: str
    priority: int
    checkpoint: str
    created_at: float
    tasks: StateCounts
    episodes_planned: int
    episodes_completed: int
    episodes_succeeded: int
    spec_json: str
    canary: Canary
    paused: bool
    sequential: SequentialState
    max_leased_tasks: int
    def __init__(self, submission_id: _Optional[str] = ..., route: _Optional[str] = ..., priority: _Optional[int] = ..., checkpoint: _Optional[str] = ..., created_at: _Optional[float] = ..., tasks: _Optional[_Union[StateCounts, _Mapping]] = ..., episodes_planned: _Optional[int] = ..., episodes_completed: _Optional[int] = ..., episodes_succeeded: _Optional[int] = ..., spec_json: _Optional[str] = ..., canary: _Optional[_Union[Canary, _Mapping]] = ..., paused: _Optional[bool] = ..., sequential: _Optional[_Union[SequentialState, _Mapping]] = ..., max_leased_tasks: _Optional[int] = ...) -> None: ...

class CanarySettings(_message.Message):
    __slots__ = ("tasks", "pause")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    tasks: int
    pause: bool
    def __init__(self, tasks: _Optional[int] = ..., pause: _Optional[bool] = ...) -> None: ...

class Canary(_message.Message):
    __slots__ = ("settings", "verdict", "findings", "episodes")
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    FINDINGS_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    settings: CanarySettings
    verdict: str
    findings: _containers.RepeatedCompositeFieldContainer[CanaryFinding]
    episodes: int
    def __init__(self, settings: _Optional[_Union[CanarySettings, _Mapping]] = ..., verdict: _Optional[str] = ..., findings: _Optional[_Iterable[_Union[CanaryFinding, _Mapping]]] = ..., episodes: _Optional[int] = ...) -> None: ...

class CanaryFinding(_message.Message):
    __slots__ = ("signature", "evidence")
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    signature: str
    evidence: str
    def __init__(self, signature: _Optional[str] = ..., evidence: _Optional[str] = ...) -> None: ...

class PauseSubmissionRequest(_message.Message):
    __slots__ = ("submission_id", "paused")
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    submission_id: str
    paused: bool
    def __init__(self, submission_id: _Optional[str] = ..., paused: _Optional[bool] = ...) -> None: ...

class PauseSubmissionResponse(_message.Message):
    __slots__ = ("changed",)
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    def __init__(self, changed: _Optional[bool] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ("submission_id",)
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    submission_id: str
    def __init__(self, submission_id: _Optional[str] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("tasks", "submissions", "stacks")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    SUBMISSIONS_FIELD_NUMBER: _ClassVar[int]
    STACKS_FIELD_NUMBER: _ClassVar[int]
    tasks: StateCounts
    submissions: _containers.RepeatedCompositeFieldContainer[SubmissionStatus]
    stacks: _containers.RepeatedCompositeFieldContainer[StackDemand]
    def __init__(self, tasks: _Optional[_Union[StateCounts, _Mapping]] = ..., submissions: _Optional[_Iterable[_Union[SubmissionStatus, _Mapping]]] = ..., stacks: _Optional[_Iterable[_Union[StackDemand, _Mapping]]] = ...) -> None: ...

class StackDemand(_message.Message):
    __slots__ = ("stack", "pending_tasks", "workers")
    STACK_FIELD_NUMBER: _ClassVar[int]
    PENDING_TASKS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    stack: str
    pending_tasks: int
    workers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stack: _Optional[str] = ..., pending_tasks: _Optional[int] = ..., workers: _Optional[_Iterable[str]] = ...) -> None: ...

class GetSummaryRequest(_message.Message):
    __slots__ = ("submission_id", "include_episodes")
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EPISODES_FIELD_NUMBER: _ClassVar[int]
    submission_id: str
    include_episodes: bool
    def __init__(self, submission_id: _Optional[str] = ..., include_episodes: _Optional[bool] = ...) -> None: ...

class ManifestSummary(_message.Message):
    __slots__ = ("manifest_hash", "benchmark", "task", "setting", "episodes_planned", "episodes_completed", "episodes_succeeded", "attempts", "workers", "episode_wall_seconds_total", "episode_wall_seconds_mean", "episode_wall_seconds_max", "tasks", "failures", "succeeded_episodes", "failed_episodes")
    MANIFEST_HASH_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    SETTING_FIELD_NUMBER: _ClassVar[int]
    EPISODES_PLANNED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    EPISODE_WALL_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EPISODE_WALL_SECONDS_MEAN_FIELD_NUMBER: _ClassVar[int]
    EPISODE_WALL_SECONDS_MAX_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_EPISODES_FIELD_NUMBER: _ClassVar[int]
    FAILED_EPISODES_FIELD_NUMBER: _ClassVar[int]
    manifest_hash: str
    benchmark: str
    task: str
    setting: str
    episodes_planned: int
    episodes_completed: int
    episodes_succeeded: int
    attempts: int
    workers: int
    episode_wall_seconds_total: float
    episode_wall_seconds_mean: float
    episode_wall_seconds_max: float
    tasks: StateCounts
    failures: _containers.RepeatedCompositeFieldContainer[FailureCount]
    succeeded_episodes: _containers.RepeatedScalarFieldContainer[int]
    failed_episodes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, manifest_hash: _Optional[str] = ..., benchmark: _Optional[str] = ..., task: _Optional[str] = ..., setting: _Optional[str] = ..., episodes_planned: _Optional[int] = ..., episodes_completed: _Optional[int] = ..., episodes_succeeded: _Optional[int] = ..., attempts: _Optional[int] = ..., workers: _Optional[int] = ..., episode_wall_seconds_total: _Optional[float] = ..., episode_wall_seconds_mean: _Optional[float] = ..., episode_wall_seconds_max: _Optional[float] = ..., tasks: _Optional[_Union[StateCounts, _Mapping]] = ..., failures: _Optional[_Iterable[_Union[FailureCount, _Mapping]]] = ..., succeeded_episodes: _Optional[_Iterable[int]] = ..., failed_episodes: _Optional[_Iterable[int]] = ...) -> None: ...

class FailureCount(_message.Message):
    __slots__ = ("reason", "attempts")
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    reason: FailureReason
    attempts: int
    def __init__(self, reason: _Optional[_Union[FailureReason, str]] = ..., attempts: _Optional[int] = ...) -> None: ...

class GetSummaryResponse(_message.Message):
    __slots__ = ("submission_id", "checkpoint", "episodes_planned", "episodes_completed", "episodes_succeeded", "complete", "tasks", "manifests", "workers", "execute_steps", "provenance", "sequential")
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    EPISODES_PLANNED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    MANIFESTS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_STEPS_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_FIELD_NUMBER: _ClassVar[int]
    submission_id: str
    checkpoint: str
    episodes_planned: int
    episodes_completed: int
    episodes_succeeded: int
    complete: bool
    tasks: StateCounts
    manifests: _containers.RepeatedCompositeFieldContainer[ManifestSummary]
    workers: _containers.RepeatedScalarFieldContainer[str]
    execute_steps: int
    provenance: _containers.RepeatedCompositeFieldContainer[EpisodeProvenance]
    sequential: SequentialState
    def __init__(self, submission_id: _Optional[str] = ..., checkpoint: _Optional[str] = ..., episodes_planned: _Optional[int] = ..., episodes_completed: _Optional[int] = ..., episodes_succeeded: _Optional[int] = ..., complete: _Optional[bool] = ..., tasks: _Optional[_Union[StateCounts, _Mapping]] = ..., manifests: _Optional[_Iterable[_Union[ManifestSummary, _Mapping]]] = ..., workers: _Optional[_Iterable[str]] = ..., execute_steps: _Optional[int] = ..., provenance: _Optional[_Iterable[_Union[EpisodeProvenance, _Mapping]]] = ..., sequential: _Optional[_Union[SequentialState, _Mapping]] = ...) -> None: ...

class EpisodeProvenance(_message.Message):
    __slots__ = ("execute_steps", "remote", "episodes")
    EXECUTE_STEPS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    execute_steps: int
    remote: RemotePolicy
    episodes: int
    def __init__(self, execute_steps: _Optional[int] = ..., remote: _Optional[_Union[RemotePolicy, _Mapping]] = ..., episodes: _Optional[int] = ...) -> None: ...

class TaskSelector(_message.Message):
    __slots__ = ("submission_id", "task_ids", "route", "states")
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    submission_id: str
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    route: str
    states: _containers.RepeatedScalarFieldContainer[TaskState]
    def __init__(self, submission_id: _Optional[str] = ..., task_ids: _Optional[_Iterable[str]] = ..., route: _Optional[str] = ..., states: _Optional[_Iterable[_Union[TaskState, str]]] = ...) -> None: ...

class TaskInfo(_message.Message):
    __slots__ = ("task_id", "submission_id", "index", "manifest_hash", "episode_start", "episode_end", "route", "priority", "state", "attempts", "max_attempts", "fencing_token", "worker_id", "lease_deadline", "last_error", "episodes_done", "updated_at", "checkpoint", "last_failure_reason", "stack")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_HASH_FIELD_NUMBER: _ClassVar[int]
    EPISODE_START_FIELD_NUMBER: _ClassVar[int]
    EPISODE_END_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    EPISODES_DONE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    STACK_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    submission_id: str
    index: int
    manifest_hash: str
    episode_start: int
    episode_end: int
    route: str
    priority: int
    state: TaskState
    attempts: int
    max_attempts: int
    fencing_token: int
    worker_id: str
    lease_deadline: float
    last_error: str
    episodes_done: int
    updated_at: float
    checkpoint: str
    last_failure_reason: FailureReason
    stack: str
    def __init__(self, task_id: _Optional[str] = ..., submission_id: _Optional[str] = ..., index: _Optional[int] = ..., manifest_hash: _Optional[str] = ..., episode_start: _Optional[int] = ..., episode_end: _Optional[int] = ..., route: _Optional[str] = ..., priority: _Optional[int] = ..., state: _Optional[_Union[TaskState, str]] = ..., attempts: _Optional[int] = ..., max_attempts: _Optional[int] = ..., fencing_token: _Optional[int] = ..., worker_id: _Optional[str] = ..., lease_deadline: _Optional[float] = ..., last_error: _Optional[str] = ..., episodes_done: _Optional[int] = ..., updated_at: _Optional[float] = ..., checkpoint: _Optional[str] = ..., last_failure_reason: _Optional[_Union[FailureReason, str]] = ..., stack: _Optional[str] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("selector", "limit")
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    selector: TaskSelector
    limit: int
    def __init__(self, selector: _Optional[_Union[TaskSelector, _Mapping]] = ..., limit: _Optional[int] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "truncated")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskInfo]
    truncated: bool
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskInfo, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("worker_id", "host", "gpu_uuid", "routes", "versions_json", "registered_at", "last_seen", "state", "current_task", "stacks")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TASK_FIELD_NUMBER: _ClassVar[int]
    STACKS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    host: str
    gpu_uuid: str
    routes: _containers.RepeatedScalarFieldContainer[str]
    versions_json: str
    registered_at: float
    last_seen: float
    state: str
    current_task: str
    stacks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, worker_id: _Optional[str] = ..., host: _Optional[str] = ..., gpu_uuid: _Optional[str] = ..., routes: _Optional[_Iterable[str]] = ..., versions_json: _Optional[str] = ..., registered_at: _Optional[float] = ..., last_seen: _Optional[float] = ..., state: _Optional[str] = ..., current_task: _Optional[str] = ..., stacks: _Optional[_Iterable[str]] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers",)
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("attempt", "fencing_token", "worker_id", "started_at", "ended_at", "outcome", "error", "failure_reason")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    fencing_token: int
    worker_id: str
    started_at: float
    ended_at: float
    outcome: str
    error: str
    failure_reason: FailureReason
    def __init__(self, attempt: _Optional[int] = ..., fencing_token: _Optional[int] = ..., worker_id: _Optional[str] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., outcome: _Optional[str] = ..., error: _Optional[str] = ..., failure_reason: _Optional[_Union[FailureReason, str]] = ...) -> None: ...

class StoredEpisode(_message.Message):
    __slots__ = ("result", "fencing_token", "worker_id", "reported_at", "artifacts")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    result: EpisodeResult
    fencing_token: int
    worker_id: str
    reported_at: float
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    def __init__(self, result: _Optional[_Union[EpisodeResult, _Mapping]] = ..., fencing_token: _Optional[int] = ..., worker_id: _Optional[str] = ..., reported_at: _Optional[float] = ..., artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task", "attempts", "episodes")
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    task: TaskInfo
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    episodes: _containers.RepeatedCompositeFieldContainer[StoredEpisode]
    def __init__(self, task: _Optional[_Union[TaskInfo, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., episodes: _Optional[_Iterable[_Union[StoredEpisode, _Mapping]]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("selector",)
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    selector: TaskSelector
    def __init__(self, selector: _Optional[_Union[TaskSelector, _Mapping]] = ...) -> None: ...

class RequeueRequest(_message.Message):
    __slots__ = ("selector",)
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    selector: TaskSelector
    def __init__(self, selector: _Optional[_Union[TaskSelector, _Mapping]] = ...) -> None: ...

class SetPriorityRequest(_message.Message):
    __slots__ = ("selector", "priority")
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    selector: TaskSelector
    priority: int
    def __init__(self, selector: _Optional[_Union[TaskSelector, _Mapping]] = ..., priority: _Optional[int] = ...) -> None: ...

class ChangeResponse(_message.Message):
    __slots__ = ("changed",)
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    changed: int
    def __init__(self, changed: _Optional[int] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("sha256", "kind", "media_type", "size_bytes", "task_id", "episode_index", "fencing_token", "uploaded_at", "collected_at")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_INDEX_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    UPLOADED_AT_FIELD_NUMBER: _ClassVar[int]
    COLLECTED_AT_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    kind: str
    media_type: str
    size_bytes: int
    task_id: str
    episode_index: int
    fencing_token: int
    uploaded_at: float
    collected_at: float
    def __init__(self, sha256: _Optional[str] = ..., kind: _Optional[str] = ..., media_type: _Optional[str] = ..., size_bytes: _Optional[int] = ..., task_id: _Optional[str] = ..., episode_index: _Optional[int] = ..., fencing_token: _Optional[int] = ..., uploaded_at: _Optional[float] = ..., collected_at: _Optional[float] = ...) -> None: ...

class ArtifactHeader(_message.Message):
    __slots__ = ("lease", "episode_index", "kind", "media_type", "size_bytes", "sha256")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_INDEX_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    episode_index: int
    kind: str
    media_type: str
    size_bytes: int
    sha256: str
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., episode_index: _Optional[int] = ..., kind: _Optional[str] = ..., media_type: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class UploadArtifactRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: ArtifactHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[ArtifactHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadArtifactResponse(_message.Message):
    __slots__ = ("artifact", "created")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    artifact: Artifact
    created: bool
    def __init__(self, artifact: _Optional[_Union[Artifact, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetArtifactRequest(_message.Message):
    __slots__ = ("sha256",)
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    def __init__(self, sha256: _Optional[str] = ...) -> None: ...

class ArtifactChunk(_message.Message):
    __slots__ = ("data", "size_bytes", "media_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    size_bytes: int
    media_type: str
    def __init__(self, data: _Optional[bytes] = ..., size_bytes: _Optional[int] = ..., media_type: _Optional[str] = ...) -> None: ...

class CollectArtifactsRequest(_message.Message):
    __slots__ = ("submission_id", "force")
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    submission_id: str
    force: bool
    def __init__(self, submission_id: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class CollectArtifactsResponse(_message.Message):
    __slots__ = ("artifacts_collected", "files_deleted", "bytes_freed")
    ARTIFACTS_COLLECTED_FIELD_NUMBER: _ClassVar[int]
    FILES_DELETED_FIELD_NUMBER: _ClassVar[int]
    BYTES_FREED_FIELD_NUMBER: _ClassVar[int]
    artifacts_collected: int
    files_deleted: int
    bytes_freed: int
    def __init__(self, artifacts_collected: _Optional[int] = ..., files_deleted: _Optional[int] = ..., bytes_freed: _Optional[int] = ...) -> None: ...
