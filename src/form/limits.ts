import { Cluster } from '../api';

export type Limits = Cluster['limits'];

/**
 * What the admin's rules allow for the field at `path`, in words, for the form
 * to show under it (the server refuses beyond them as the person types).
 */
export function limitNote(limits: Limits, path: string): string | undefined {
  if (path === 'image' && limits.images.length) {
    return `Allowed here: ${limits.images.join(', ')}`;
  }
  if (path === 'replicas') {
    const rules = [
      limits.max_replicas !== null &&
        `${count(limits.max_replicas, 'replica')} in all`,
      limits.max_gpus_per_replica !== null &&
        `${count(limits.max_gpus_per_replica, 'GPU')} per replica`,
      limits.max_gpus_per_job !== null &&
        `${count(limits.max_gpus_per_job, 'GPU')} per job`
    ].filter(Boolean);
    return rules.length ? `At most ${rules.join(', ')}` : undefined;
  }
  if (
    path === 'policy.deadline_seconds' &&
    limits.max_deadline_seconds !== null
  ) {
    return `At most ${limits.max_deadline_seconds} s here, and the deadline of a job that names none`;
  }
  if (path === 'policy.ttl_after_finished' && limits.ttl_after_finished) {
    return `Jobs naming none are kept ${limits.ttl_after_finished} here once finished`;
  }
  if (path === 'policy.hang_after' && limits.hang_after) {
    return `Jobs naming none are hung after ${limits.hang_after} here without progress`;
  }
  if ((path === 'data' || path === 'output') && limits.host_paths?.length) {
    return `Host directories allowed: ${limits.host_paths.join(', ')} (and what is inside them)`;
  }
  return undefined;
}

/**
 * The most GPUs one replica could ever get on the backend, under the admin's
 * rule: this machine's on the local backend, the largest node's on
 * Kubernetes (a replica runs on one node); the admin's rule alone where the
 * backend does not say.
 */
export function gpusPerReplica(cluster: Cluster): number | null {
  const { gpus, limits } = cluster;
  if (!gpus) {
    return limits.max_gpus_per_replica;
  }
  const here =
    cluster.backend === 'kubernetes'
      ? Math.max(0, ...(gpus.devices ?? []).map(node => Number(node.gpus) || 0))
      : (gpus.capacity ?? 0);
  return Math.min(here, limits.max_gpus_per_replica ?? here);
}

/** How many of the backend's GPUs are free, or that it has none. */
export function gpusFree(cluster: Cluster): string {
  const { capacity, available } = cluster.gpus ?? { capacity: 0, available: 0 };
  return capacity ? `${available} of ${capacity} free` : 'none on this backend';
}

function count(amount: number, thing: string): string {
  return `${amount} ${thing}${amount === 1 ? '' : 's'}`;
}
