import { limitNote, Limits } from '../form/limits';

const none: Limits = {
  host_paths: null,
  images: [],
  max_replicas: null,
  max_gpus_per_replica: null,
  max_gpus_per_job: null,
  max_deadline_seconds: null,
  gpu_types: [],
  ttl_after_finished: null
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
      ttl_after_finished: '7d'
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
  });
});
