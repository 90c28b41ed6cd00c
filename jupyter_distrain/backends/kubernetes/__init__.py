"""The Kubernetes backend: jobs as objects in a namespace, run by an engine in the cluster (see backend.py).

KubeBackend is made of plain parts, each given the one NamespaceObjects they share (the client, the cache, the
locks) and the parts it stands on:

    backend.py      KubeBackend: the verbs that change jobs (submit, stop, restart, delete), logs, start/close
    observe.py      JobObserver: a job as it stands, from its objects (get, list); on PodSupervisor
    reconcile.py    PodSupervisor: the lifecycle policy applied to jobs on bare pods (engine "pods"); on LogCopier
    logcopy.py      LogCopier: pods/log copied into log files, the output volume's lines read back
    engines.py      Engines: which engine runs a job, what the cluster can never run, queues and capacity
    credentials.py  CredentialStore: git credentials as Secrets
    podstacks.py    ReplicaStacks: a running job's stacks, dumped in its pods through pods/exec
    waiting.py      WhyItWaits: why a job waits (capacity.py: what nodes have free, what replicas ask)
    companions.py   Companions: a run's monitor and the namespace's janitor made beside the jobs
    objects.py      NamespaceObjects: the namespace's objects read (through the cache when watching) and written
    controller.py   NamespaceController: the cache kept current, the policy applied as objects change
    watch.py        the watch-fed cache and the work queue of changed jobs
    state.py        a job's status from its objects (pure)
    render.py       every object of a job (pure): its ConfigMap, workload and companions (TensorBoard,
                    sweeper, janitor, log reader, purger); podspec.py the replicas' pods and the engines'
                    objects; naming.py the labels, names and APIs they share; roles.py the rights of the
                    programs in the cluster (monitor, sweeper, janitor)
    loglines.py     the lines of the log files; apiclient.py the API client, each request with its deadline
"""

from .backend import KubeBackend

__all__ = ["KubeBackend"]
