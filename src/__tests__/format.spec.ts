import type { JobSummary } from '../api';
import {
  age,
  bytes,
  endedSince,
  matches,
  progressText,
  ready,
  shorten,
  usedText,
  why
} from '../format';

const job = {
  name: 'mnist',
  phase: 'Running',
  backend: 'local',
  owner: 'alice',
  replica_phases: { Running: 1, Pending: 2 }
} as unknown as JobSummary;

describe('format', () => {
  it('counts running replicas', () => {
    expect(ready(job)).toBe('1/3');
    expect(ready({ replica_phases: {} })).toBe('0/0');
  });

  it('gives ages in their largest unit', () => {
    const now = Date.parse('2026-01-02T00:00:00Z');
    expect(age('2026-01-01T23:59:15Z', now)).toBe('45s');
    expect(age('2026-01-01T22:00:00Z', now)).toBe('2h');
    expect(age('2025-12-30T00:00:00Z', now)).toBe('3d');
  });

  it('gives sizes in binary units', () => {
    expect(bytes(512)).toBe('512 B');
    expect(bytes(1536)).toBe('1.5 KiB');
    expect(bytes(3 * 1024 ** 3)).toBe('3.0 GiB');
  });

  it('matches every word of a filter', () => {
    expect(matches(job, 'mni run')).toBe(true);
    expect(matches(job, 'mnist failed')).toBe(false);
    expect(matches(job, 'alice mnist')).toBe(true);
  });

  it('says why a job is in its phase without repeating the phase', () => {
    expect(
      why({
        phase: 'Stopped',
        reason: 'Stopped',
        message: 'stopped by request'
      })
    ).toBe('stopped by request');
    expect(
      why({ phase: 'Failed', reason: 'Error', message: 'chief-0 exited 1' })
    ).toBe('Error: chief-0 exited 1');
  });

  it('shortens long names in the middle, where variants differ least', () => {
    expect(shorten('short')).toBe('short');
    const a = shorten('ps-regression-experiment-lr-0.1', 20);
    const b = shorten('ps-regression-experiment-lr-0.01', 20);
    expect(a).toHaveLength(20);
    expect(a).not.toBe(b);
    expect(a.startsWith('ps-regre')).toBe(true);
    expect(a.endsWith('lr-0.1')).toBe(true);
  });

  it('tells a run that ended since the last look, a restarted one too', () => {
    const seen = (phase: string, run: number) =>
      ({ phase, run }) as Pick<JobSummary, 'phase' | 'run'>;
    expect(endedSince(seen('Running', 1), seen('Succeeded', 1))).toBe(true);
    expect(endedSince(seen('Pending', 1), seen('Failed', 1))).toBe(true);
    expect(endedSince(seen('Pending', 1), seen('Running', 1))).toBe(false);
    expect(endedSince(seen('Succeeded', 1), seen('Succeeded', 1))).toBe(false);
    // restarted, then stopped, between two looks
    expect(endedSince(seen('Succeeded', 1), seen('Stopped', 2))).toBe(true);
    expect(endedSince(seen('Succeeded', 1), seen('Running', 2))).toBe(false);
  });

  it('says progress as the command line does, and never guesses a total', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    const at = {
      fraction: 0.3125,
      ends: '2026-01-01T00:14:10Z',
      epoch: 4,
      epochs: 10,
      step: 8,
      steps: 64,
      updated: '2026-01-01T00:00:00Z',
      replica: 'worker-0'
    };
    expect(progressText(at, now)).toBe(
      '31% (epoch 4/10, step 8/64), 14 min left'
    );
    expect(
      progressText({ ...at, ends: '2026-01-01T02:05:00Z', epochs: null }, now)
    ).toBe('31% (epoch 4, step 8/64), 2 h 5 min left');
    expect(
      progressText({ ...at, fraction: null, epochs: null, ends: null }, now)
    ).toBe('epoch 4, step 8/64 (total unknown)');
    expect(progressText({ ...at, fraction: 1 }, now)).toBe(
      '100% (epoch 4/10, step 8/64)'
    );
    expect(progressText(null)).toBe('');
  });

  it('says what a run used, leaving out what is not known', () => {
    const used = {
      wall_seconds: 5.6,
      cpu_seconds: 8.34,
      peak_memory: 119656448,
      gpu_hours: 0.5
    };
    expect(usedText(used)).toBe(
      '6 s, 8.3 CPU-s, peak 114.1 MiB, 0.5 GPU-hours'
    );
    expect(
      usedText({ ...used, cpu_seconds: null, peak_memory: null, gpu_hours: 0 })
    ).toBe('6 s');
    expect(usedText({ ...used, cost: 1.5 })).toBe(
      '6 s, 8.3 CPU-s, peak 114.1 MiB, 0.5 GPU-hours, cost 1.50'
    );
  });
});
