"""The lifecycle policy, shared by every backend."""

from jupyter_distrain import spec as spec_
from jupyter_distrain.backends.kubernetes import podspec, render
from jupyter_distrain.config import Distrain
from jupyter_distrain.policy import Phase, Replica, decide

R, S, F, P, X = Phase.RUNNING, Phase.SUCCEEDED, Phase.FAILED, Phase.PENDING, Phase.STOPPED


def tf(**policy):
    return spec_.validate({"name": "j", "framework": "tensorflow", "command": "t", "policy": policy,
                           "replicas": {"chief": {}, "ps": {}, "worker": {"count": 2}}})


def states(chief, ps, w0, w1, codes=None, restarts=0):
    codes = codes or {}
    names = [("chief", 0, chief), ("ps", 0, ps), ("worker", 0, w0), ("worker", 1, w1)]
    return [Replica(role, i, phase, codes.get(f"{role}-{i}"), restarts) for role, i, phase in names]


def test_chief_success_ends_the_job_and_stops_the_rest():
    d = decide(tf(), states(S, R, R, R))
    assert (d.phase, d.exit_code, d.stop_others, d.message) == (S, 0, True, "chief-0 succeeded")


def test_any_failure_fails_the_job_with_its_exit_code():
    d = decide(tf(), states(R, R, F, R, codes={"worker-0": 137}))
    assert (d.phase, d.exit_code, d.reason, d.stop_others) == (F, 137, "ReplicaFailed", True)


def test_all_workers_policy_waits_for_every_worker():
    assert decide(tf(success="all-workers"), states(S, R, S, R)).phase == R
    d = decide(tf(success="all-workers"), states(S, R, S, S))
    assert (d.phase, d.message) == (S, "all workers succeeded")


def test_without_chief_worker_zero_decides():
    spec = spec_.validate({"name": "j", "framework": "tensorflow", "command": "t",
                           "replicas": {"ps": {}, "worker": {"count": 2}}})
    d = decide(spec, [Replica("ps", 0, R), Replica("worker", 0, S, 0), Replica("worker", 1, R)])
    assert d.phase == S and d.message == "worker-0 succeeded"


def test_restart_policies():
    codes = {"worker-0": 1}
    assert decide(tf(restart="on-failure", max_restarts=2), states(R, R, F, R, codes)).restart == ("worker-0",)
    assert decide(tf(restart="on-failure", max_restarts=2), states(R, R, F, R, codes, restarts=2)).phase == F
    # exit-code: 1-127 are permanent, 128-255 (killed by a signal) are retried
    assert decide(tf(restart="exit-code", max_restarts=1), states(R, R, F, R, codes)).phase == F
    d = decide(tf(restart="exit-code", max_restarts=1), states(R, R, F, R, {"worker-0": 137}))
    assert (d.phase, d.restart) == (R, ("worker-0",))
    assert decide(tf(), states(R, R, F, R, codes)).restart == ()


def test_pending_is_reported_with_who():
    d = decide(tf(), states(R, P, R, P))
    assert (d.phase, d.message) == (P, "waiting for ps-0, worker-1")


def test_the_evaluator_finishes_its_last_evaluation_before_the_job_succeeds():
    """Training done, the job runs on (saying so) until its evaluator, which ends on its own, has succeeded;
    the JobSet's success policy says the same, and a TFJob, which would not wait, is refused."""
    spec = spec_.validate({"name": "j", "framework": "tensorflow", "command": "t", "policy": {"success": "all-workers"},
                           "replicas": {"worker": {"count": 2}, "evaluator": {}}})
    workers = [Replica("worker", 0, S, 0), Replica("worker", 1, S, 0)]
    d = decide(spec, [*workers, Replica("evaluator", 0, R)])
    assert (d.phase, d.reason, d.message, d.stop_others) == (R, "Evaluating",
                                                             "training succeeded; waiting for evaluator-0", False)
    d = decide(spec, [*workers, Replica("evaluator", 0, S, 0)])
    assert (d.phase, d.message) == (S, "all workers and evaluator-0 succeeded")
    assert decide(spec, [*workers, Replica("evaluator", 0, F, 1)]).phase == F

    settings = Distrain()
    owner = render.root(spec, settings, "jobset")
    assert podspec.jobset(spec, settings, owner)["spec"]["successPolicy"] == {
        "operator": "All", "targetReplicatedJobs": ["worker-0", "worker-1", "evaluator-0"]}
    refusal = podspec.kubeflow_refusal(spec)
    assert refusal is not None and refusal.path == "replicas.evaluator"
