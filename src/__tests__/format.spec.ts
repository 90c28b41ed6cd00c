import type { JobSummary } from '../api';
import {
  age,
  bytes,
  endedSince,
  matches,
  ready,
  shorten,
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
});
