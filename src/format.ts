import type { JobSummary, Phase, Progress, Usage } from './api';

/** Phases after which a job's run changes no more. */
export const FINISHED: ReadonlySet<Phase> = new Set([
  'Succeeded',
  'Failed',
  'Stopped',
  'Lost'
]);

/**
 * Whether a run of `job` ended since it was seen as `before`: one that ran
 * then, or one restarted and ended in between.
 */
export function endedSince(
  before: Pick<JobSummary, 'phase' | 'run'>,
  job: Pick<JobSummary, 'phase' | 'run'>
): boolean {
  return (
    FINISHED.has(job.phase) &&
    (!FINISHED.has(before.phase) || before.run !== job.run)
  );
}

/**
 * "2/4": replicas running out of all replicas.
 */
export function ready(job: Pick<JobSummary, 'replica_phases'>): string {
  const all = Object.values(job.replica_phases).reduce((sum, n) => sum + n, 0);
  return `${job.replica_phases.Running ?? 0}/${all}`;
}

/**
 * Why a job is in its phase: its reason (unless it only repeats the phase) and
 * message, "Completed: worker-0 succeeded".
 */
export function why(
  job: Pick<JobSummary, 'phase' | 'reason' | 'message'>
): string {
  const reason = job.reason === job.phase ? '' : job.reason;
  return [reason, job.message].filter(Boolean).join(': ');
}

/**
 * Time since `iso`, in its largest unit: "45s", "12m", "3h", "2d".
 */
export function age(iso: string, now: number = Date.now()): string {
  const seconds = Math.max(0, Math.floor((now - Date.parse(iso)) / 1000));
  const units: [number, string][] = [
    [86400, 'd'],
    [3600, 'h'],
    [60, 'm']
  ];
  for (const [size, unit] of units) {
    if (seconds >= size) {
      return `${Math.floor(seconds / size)}${unit}`;
    }
  }
  return `${seconds}s`;
}

/**
 * Time until `iso`, as `age` writes it ("0s" once it has passed).
 */
export function until(iso: string, now: number = Date.now()): string {
  return age(new Date(now).toISOString(), Date.parse(iso));
}

/**
 * Whether a job matches a filter: every word appears in its name, phase, backend
 * or owner, ignoring case (the server's `GET jobs?q=` is the same rule:
 * jupyter_distrain/joblist.py).
 */
export function matches(job: JobSummary, filter: string): boolean {
  const haystack =
    `${job.name} ${job.phase} ${job.backend} ${job.owner}`.toLowerCase();
  return filter
    .toLowerCase()
    .split(/\s+/)
    .every(word => haystack.includes(word));
}

/**
 * A byte count in its largest binary unit: "512 B", "1.5 KiB", "2.0 GiB".
 */
export function bytes(count: number): string {
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = count;
  let unit = 'B';
  for (const next of units) {
    if (value < 1024) {
      break;
    }
    value /= 1024;
    unit = next;
  }
  return unit === 'B' ? `${value} B` : `${value.toFixed(1)} ${unit}`;
}

/**
 * `text` at most `max` characters long, its middle elided: variants of one
 * experiment ("sweep-lr-0.1", "sweep-lr-0.01") differ at the end.
 */
export function shorten(text: string, max = 28): string {
  if (text.length <= max) {
    return text;
  }
  const head = Math.ceil((max - 1) / 2);
  return `${text.slice(0, head)}…${text.slice(text.length - (max - 1 - head))}`;
}

/**
 * Where a running job or replica stands, in words: "31% (epoch 4/10, step
 * 45/63), 14 min left"; "" where no line said anything (the command line's is
 * jupyter_distrain/eta.py's said).
 */
export function progressText(
  progress: Progress | null | undefined,
  now: number = Date.now()
): string {
  if (!progress) {
    return '';
  }
  const counted = (
    [
      ['epoch', progress.epoch, progress.epochs],
      ['step', progress.step, progress.steps]
    ] as [string, number | null, number | null][]
  )
    .filter(([, at]) => at !== null)
    .map(([unit, at, of]) => `${unit} ${at}${of ? `/${of}` : ''}`)
    .join(', ');
  if (progress.fraction === null) {
    return `${counted} (total unknown)`;
  }
  let words = `${Math.round(progress.fraction * 100)}%`;
  if (counted) {
    words += ` (${counted})`;
  }
  if (progress.fraction < 1 && progress.ends) {
    words += `, ${timeLeft(Math.max(0, (Date.parse(progress.ends) - now) / 1000))} left`;
  }
  return words;
}

/**
 * Seconds as a person reads a time left: "40 s", "14 min", "2 h 5 min".
 */
export function timeLeft(seconds: number): string {
  if (seconds < 60) {
    return `${Math.round(seconds)} s`;
  }
  const minutes = Math.round(seconds / 60);
  return minutes < 60
    ? `${minutes} min`
    : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/**
 * A run's usage in words, what is not known left out: "6 s, 8.3 CPU-s, peak
 * 114.1 MiB, 0.5 GPU-hours".
 */
export function usedText(usage: Usage): string {
  const said = [`${timeLeft(usage.wall_seconds ?? 0)}`];
  if (usage.cpu_seconds !== null) {
    said.push(`${usage.cpu_seconds.toFixed(1)} CPU-s`);
  }
  if (usage.peak_memory !== null) {
    said.push(`peak ${bytes(usage.peak_memory)}`);
  }
  if (usage.gpu_hours) {
    said.push(`${Number(usage.gpu_hours.toPrecision(3))} GPU-hours`);
  }
  if (usage.cost !== null && usage.cost !== undefined) {
    said.push(`cost ${usage.cost.toFixed(2)}`);
  }
  return said.join(', ');
}
