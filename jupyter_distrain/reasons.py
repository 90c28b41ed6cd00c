"""The reasons this product gives for a job's, a replica's or an event's state: machine-readable, CamelCase as
Kubernetes' own, each named once here. A reason that Kubernetes itself reports (a pod's, a Job's) is compared as
Kubernetes spells it where it is read."""

CREATED = "Created"  # a job made, no replica started yet
SUBMITTED = "Submitted"  # the job accepted (an event)
PREPARING = "Preparing"  # the local supervisor fetching code and installing requirements
CLONING = "Cloning"  # fetching the job's git repository (an event)
REUSING = "Reusing"  # a Python environment already made for these requirements (an event)
INSTALLING = "Installing"  # installing the job's requirements (an event)
SCHEDULING = "Scheduling"  # a pod waiting for a node
STARTING = "Starting"  # a pod on its node, its containers not running yet
STARTED = "Started"  # the replicas launched (an event)
REPLICAS_PENDING = "ReplicasPending"  # some replicas not running yet
EVALUATING = "Evaluating"  # the trainers done, evaluators still running
UNSCHEDULABLE = "Unschedulable"  # no node can take a pod (the scheduler's reason, the job's too)
RESTARTING = "Restarting"  # a failed replica the policy restarts
RESTARTED = "Restarted"  # the job's next run begun (an event)
COMPLETED = "Completed"  # the job (or a replica) succeeded
REPLICA_FAILED = "ReplicaFailed"  # a replica failed, so the job did (its message names the replica and why)
STOPPED = "Stopped"  # stopped by request
NEVER_STARTED = "NeverStarted"  # a replica stopped before it ever ran
DEADLINE_EXCEEDED = "DeadlineExceeded"  # the job ran past policy.deadline_seconds
NO_PROGRESS = "NoProgress"  # no log line and no TensorBoard step for policy.hang_after (an event, the job's reason)
STRAGGLER = "Straggler"  # a replica far slower than the others for a while (an event)
OVER_BUDGET = "OverBudget"  # a job submitted or restarted beyond its owner's budget, where budgets warn (an event)
HUNG = "Hung"  # a job without progress for policy.hang_after, stopped by policy.on_hang: fail
POD_MISSING = "PodMissing"  # a supervised replica's pod never came
POD_DELETED = "PodDeleted"  # a supervised replica's pod deleted by someone else
WORKLOAD_MISSING = "WorkloadMissing"  # the engine's object of a run is gone
SETUP_FAILED = "SetupFailed"  # fetching code or installing requirements failed (local)
SUPERVISOR_ERROR = "SupervisorError"  # the local supervisor failed
SUPERVISOR_FAILED = "SupervisorFailed"  # the local supervisor could not be started
SUPERVISOR_VANISHED = "SupervisorVanished"  # the local supervisor died without recording an end
PROCESS_VANISHED = "ProcessVanished"  # a local replica's process gone, its exit unknown (its supervisor gone too)
LAUNCH_INTERRUPTED = "LaunchInterrupted"  # a local launch interrupted before its supervisor ran
WORKSPACE_DISCARDED = "WorkspaceDiscarded"  # what a run wrote beside its code, gone with its workspace (an event)
EVENT_FILES_OUTSIDE = "EventFilesOutside"  # event files a run wrote where its TensorBoard does not look (an event)
LOG_WRITE_FAILED = "LogWriteFailed"  # a log the disk cannot take
LOGS_NOT_READ = "LogsNotRead"  # the output volume's lines could not be read back (an event)
NO_JANITOR = "NoJanitor"  # the namespace's janitor could not be made (an event)
NO_MONITOR = "NoMonitor"  # a run's monitor could not be made (an event)
LAUNCHED = "Launched"  # a sweep's trial launched (an event)
TRIAL_NOT_LAUNCHED = "TrialNotLaunched"  # a sweep's trial refused (an event)
EARLY_STOPPED = "EarlyStopped"  # a sweep stopped a trial early (an event)
TRIALS_FAILED = "TrialsFailed"  # no trial of a sweep succeeded
WEBHOOK_FAILED = "WebhookFailed"  # a webhook could not be told of an event (an event)

# the warnings a running job's owner is told of (besides its end): its newest is the job's `notice`
NOTICES = (NO_PROGRESS, STRAGGLER)
