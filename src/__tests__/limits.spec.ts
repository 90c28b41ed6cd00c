import type { Cluster } from '../api';
import { gpusFree, gpusPerReplica, limitNote, Limits } from '../form/limits';

const none: Limits = {
  host_paths: null,
  images: [],
  max_replicas: null,
  max_gpus_per_replica: null,
  max_gpus_per_job: null,
  max_deadline_seconds: null,
  gpu_types: [],
  ttl_after_finished: null,
  hang_after: null
};

describe('limitNote', () => {
  it('says nothing where the admin set no rule', () => {
    for (const path of [
      'image',
      'replicas',
      'data',
      'policy.deadline_seconds',
      'policy.ttl_after_finished'
    ]) {
      expect(limitNote(none, path)).toBeUndefined();
    }
  });

  it('words each rule under its field', () => {
    const limits: Limits = {
      ...none,
      host_paths: ['/data', '/scratch'],
      images: ['registry.example.com/*'],
      max_replicas: 3,
      max_gpus_per_replica: 1,
      max_gpus_per_job: 0,
      max_deadline_seconds: 3600,
      ttl_after_finished: '7d',
      hang_after: '2h'
    };
    expect(limitNote(limits, 'replicas')).toBe(
      'At most 3 replicas in all, 1 GPU per replica, 0 GPUs per job'
    );
    expect(limitNote(limits, 'image')).toBe(
      'Allowed here: registry.example.com/*'
    );
    expect(limitNote(limits, 'output')).toBe(
      'Host directories allowed: /data, /scratch (and what is inside them)'
    );
    expect(limitNote(limits, 'policy.deadline_seconds')).toContain('3600 s');
    expect(limitNote(limits, 'policy.ttl_after_finished')).toBe(
      'Jobs naming none are kept 7d here once finished'
    );
    expect(limitNote(limits, 'policy.hang_after')).toBe(
      'Jobs naming none are hung after 2h here without progress'
    );
  });
});

describe('GPUs per replica', () => {
  const cluster = (
    backend: 'local' | 'kubernetes',
    gpus: Cluster['gpus'],
    limits: Limits = none
  ): Cluster => ({
    backend,
    backends: [backend],
    default_backend: backend,
    namespaces: [],
    volumes: [],
    gpus,
    default_images: {},
    owner: 'me',
    see_all_owners: false,
    limits
  });

  it('are at most what one replica could ever get here, under the admin rule', () => {
    const noGpus = { capacity: 0, available: 0, devices: [] };
    expect(gpusPerReplica(cluster('local', noGpus))).toBe(0);
    const two = { capacity: 2, available: 1, devices: [{}, {}] };
    expect(gpusPerReplica(cluster('local', two))).toBe(2);
    const capped = { ...none, max_gpus_per_replica: 1 };
    expect(gpusPerReplica(cluster('local', two, capped))).toBe(1);
    // a replica runs on one node: the largest node's GPUs
    const nodes = {
      capacity: 10,
      available: 10,
      devices: [
        { node: 'a', gpus: 2 },
        { node: 'b', gpus: 8 }
      ]
    };
    expect(gpusPerReplica(cluster('kubernetes', nodes))).toBe(8);
    expect(gpusPerReplica(cluster('kubernetes', undefined as any))).toBeNull();
  });

  it('say how many are free, or that the backend has none', () => {
    const free = { capacity: 4, available: 1 };
    expect(gpusFree(cluster('local', free))).toBe('1 of 4 free');
    expect(gpusFree(cluster('local', { capacity: 0, available: 0 }))).toBe(
      'none on this backend'
    );
  });
});
