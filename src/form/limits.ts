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
  if ((path === 'data' || path === 'output') && limits.host_paths?.length) {
    return `Host directories allowed: ${limits.host_paths.join(', ')} (and what is inside them)`;
  }
  return undefined;
}

function count(amount: number, thing: string): string {
  return `${amount} ${thing}${amount === 1 ? '' : 's'}`;
}
