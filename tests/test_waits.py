"""Why a job waits, in words (waits.py): the sentences both backends give, from the numbers they find."""

from jupyter_distrain import waits


def replica(name: str, requested: float, free: float, largest: float, room: list[str] | None = None) -> dict:
    return {"name": name, "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "nodes": 3,
            "nodes_with_room": room or [],
            "resources": [{"resource": "gpus", "requested": requested, "largest_free": free, "node": "gpu-0",
                           "largest_allocatable": largest}]}


def test_pending_replicas_are_said_together_by_what_they_lack():
    job = {"name": "b", "phase": "Pending", "reason": "Unschedulable", "message": "", "spec": {}}
    said = waits.pending(job, [replica("worker-0", 2, 1, 2), replica("worker-1", 2, 1, 2), replica("chief-0", 4, 1, 2)])
    assert said["sentence"] == (
        "worker-0 and worker-1 wait for a node with room: it asks for 2 GPUs; the most free on a node is 1 GPU "
        "(gpu-0); chief-0 waits for a node with room: it asks for 4 GPUs; the most free on a node is 1 GPU (gpu-0), "
        "and no node has more than 2 GPUs at all.")
    # room enough somewhere: what keeps it off those nodes is the scheduler's to say (taints, affinities)
    assert waits.pending(job, [replica("worker-0", 1, 2, 2, ["gpu-0"])])["sentence"] == (
        "worker-0 waits for a node with room: the scheduler says: 0/3 nodes are available: 3 Insufficient "
        "nvidia.com/gpu.")
    assert waits.pending({**job, "message": "installing requirements"}, [])["sentence"] == "installing requirements"


def test_a_queued_jobs_place_names_the_jobs_ahead_it_may_see():
    job = {"name": "d", "phase": "Queued", "reason": "Pending", "message": "insufficient unused quota for cpu",
           "spec": {"queue": "team"}}
    place = {"queue": "team", "position": 3, "ahead": 3, "ahead_seen": ["a", "b"], "position_in_cluster_queue": 7}
    found = waits.queued(job, place)
    assert found["sentence"] == "Kueue holds it in queue team, 4th in line behind a, b and 1 of others': " \
                                "insufficient unused quota for cpu."
    assert waits.text(found).endswith("Queue team: position 4, 3 ahead (in its ClusterQueue: position 8)")
    assert waits.queued({**job, "reason": "Queued"}, None)["sentence"] == "Kueue holds it in queue team."
    assert waits.would_queue("team", {**place, "ahead_seen": []}) == \
        "3 workloads wait in queue team (3 of others'): it would queue behind them"
    assert [waits.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"]
