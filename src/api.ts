import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { components, operations } from './openapi';

/**
 * URL namespace of the jupyter-distrain server extension REST API.
 */
export const API_NAMESPACE = 'distrain/api';

/**
 * A refused request; `errors` names each failing field of a refused spec.
 */
export class APIError extends ServerConnection.ResponseError {
  constructor(
    response: Response,
    message: string | undefined,
    readonly errors: FieldError[]
  ) {
    super(response, message);
  }
}

/**
 * Call the jupyter-distrain server extension.
 *
 * @param endPoint - API path relative to `<baseUrl>/distrain/api/`
 * @param init - Initial values for the request (method, body, headers...)
 * @param settings - Server connection settings (defaults to the page settings)
 * @returns The decoded JSON body of the response (or the raw text if it is
 *   not JSON, or `undefined` for an empty body)
 * @throws ServerConnection.NetworkError if the server cannot be reached
 * @throws APIError on a non-2xx answer
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const requestUrl = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
  // JupyterLab's default, 'no-store', appends a timestamp parameter that the API
  // refuses as unknown; 'no-cache' revalidates every response instead.
  init = { cache: 'no-cache', ...init };

  let response: Response;
  try {
    response = await ServerConnection.makeRequest(requestUrl, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }

  const text = await response.text();
  let data: any = text;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      // Not JSON: keep the raw text.
    }
  } else {
    data = undefined;
  }

  if (!response.ok) {
    // Jupyter server handlers answer errors as JSON `{"message": ...}`; any
    // other body (e.g. the HTML 404 page) keeps the default error message.
    const body = data && typeof data === 'object' ? data : {};
    throw new APIError(
      response,
      'message' in body ? String(body.message) : undefined,
      body.errors ?? []
    );
  }

  return data as T;
}

/**
 * Types of the REST API, generated from its OpenAPI document (`jlpm build:api`).
 */
export type JobSummary = components['schemas']['JobSummary'];
export type JobChanges = components['schemas']['JobChanges'];
export type LogHits = components['schemas']['LogHits'];
export type LogHit = LogHits['hits'][number];
export type Job = components['schemas']['Job'];
export type Replica = components['schemas']['Replica'];
export type Progress = components['schemas']['Progress'];
export type Usage = components['schemas']['Usage'];
export type JobSpec = components['schemas']['JobSpec'];
export type Phase = components['schemas']['Phase'];
export type JobEvent = components['schemas']['Event'];
export type ReplicaMetrics = components['schemas']['ReplicaMetrics'];
export type Stacks = components['schemas']['Stacks'];
export type Frame = components['schemas']['Frame'];
/** A job's scalars: its tags, and one tag's [step, value] points per run. */
export type Scalars =
  operations['getScalars']['responses'][200]['content']['application/json'];
/** A sweep's trials, best first, and the best that succeeded. */
export type Trials = components['schemas']['Trials'];
export type Trial = Trials['trials'][number];
/** Its `code` is a spec's code (the OpenAPI document calls it an object only). */
export type Repo = Omit<components['schemas']['Repo'], 'code'> & {
  code: NonNullable<JobSpec['code']>;
};
export type Cluster = components['schemas']['Cluster'];
/** The code a job runs, and what its ref names now. */
export type JobCode = components['schemas']['JobCode'];
export type Backend = Cluster['default_backend'];
export type Check = components['schemas']['Check'];
export type Waiting = components['schemas']['Waiting'];
export type Comparison = components['schemas']['Comparison'];
export type UsageReport = components['schemas']['UsageReport'];
export type UsedRun = UsageReport['runs'][number];
export type UsageTotal = UsageReport['owners'][number];
export type FieldError = NonNullable<
  components['schemas']['Error']['errors']
>[number];

function withBackend(path: string, backend?: string): string {
  if (!backend) {
    return path;
  }
  return `${path}${path.includes('?') ? '&' : '?'}backend=${encodeURIComponent(backend)}`;
}

/** `?key=value&...` of the options that are set; '' when none is. */
function queryString(options: Record<string, string | number | undefined>) {
  return URLExt.objectToQueryString(
    Object.fromEntries(
      Object.entries(options)
        .filter(([, value]) => value !== undefined && value !== '')
        .map(([key, value]) => [key, String(value)])
    )
  );
}

function jobPath(name: string, action?: string): string {
  return `jobs/${encodeURIComponent(name)}` + (action ? `/${action}` : '');
}

/**
 * The job operations of the REST API.
 */
export const jobsAPI = {
  /**
   * The jobs added or changed since the list's `version` the caller holds, and
   * those removed; the whole list where the server cannot answer from it.
   */
  changes: (since?: string): Promise<JobChanges> =>
    requestAPI<JobChanges>('job-changes' + queryString({ since })),
  get: (name: string): Promise<Job> => requestAPI<Job>(jobPath(name)),
  /**
   * Submit to `backend`, or to the server's default one; a spec copied from
   * job `snapshotOf` runs that job's snapshot of changes.
   */
  submit: (
    spec: JobSpec,
    backend?: string,
    snapshotOf?: string
  ): Promise<Job> =>
    requestAPI<Job>(
      'jobs' + queryString({ backend, snapshot_of: snapshotOf }),
      {
        method: 'POST',
        body: JSON.stringify(spec)
      }
    ),
  /**
   * Every check a submit makes, starting nothing: the spec it would run, or
   * every error (a verdict, not a failed request: the form checks as typed).
   */
  check: (
    spec: JobSpec,
    backend?: string,
    snapshotOf?: string
  ): Promise<Check> =>
    requestAPI<Check>(
      'check' + queryString({ backend, snapshot_of: snapshotOf }),
      {
        method: 'POST',
        body: JSON.stringify(spec)
      }
    ),
  stop: (name: string): Promise<Job> =>
    requestAPI<Job>(jobPath(name, 'stop'), { method: 'POST' }),
  /** Run the job again: its code as pinned, or with `repin` its ref as it is now. */
  restart: (name: string, repin = false): Promise<Job> =>
    requestAPI<Job>(jobPath(name, 'restart') + (repin ? '?repin=true' : ''), {
      method: 'POST'
    }),
  /** The code the job runs, and what its ref names now. */
  code: (name: string): Promise<JobCode> =>
    requestAPI<JobCode>(jobPath(name, 'code')),
  /** The spec a clone of the job would run (same code, a free name), to edit and submit. */
  cloneSpec: (name: string): Promise<JobSpec> =>
    requestAPI<JobSpec>(jobPath(name, 'clone?dry_run=true'), {
      method: 'POST'
    }),
  /**
   * A new job from this one's provenance: the same spec, code and snapshot of
   * changes, on Kubernetes the image its pods ran by digest.
   */
  reproduce: (name: string): Promise<Job> =>
    requestAPI<Job>(jobPath(name, 'clone?reproduce=true'), { method: 'POST' }),
  /** The spec that fine-tunes a sweep's best trial (resuming from its output), to edit and submit. */
  finetuneSpec: (sweep: string): Promise<JobSpec> =>
    requestAPI<JobSpec>(jobPath(sweep, 'finetune?dry_run=true'), {
      method: 'POST'
    }),
  remove: (name: string): Promise<void> =>
    requestAPI<void>(jobPath(name), { method: 'DELETE' }),
  /**
   * The log of one run (else the latest) as text: one replica (else all), its
   * last `tail` lines (0: none, only whether that log is there).
   */
  logs: (
    name: string,
    options: { replica?: string; run?: number; tail?: number } = {}
  ): Promise<string> =>
    requestAPI<string>(jobPath(name, 'logs') + queryString(options)),
  /** The lines of a run's logs holding `q`, searched on the server. */
  searchLogs: (
    name: string,
    options: { q: string; replica?: string; run?: number }
  ): Promise<LogHits> =>
    requestAPI<LogHits>(jobPath(name, 'logs/search') + queryString(options))
};

/**
 * What the server offers, and where a notebook's code comes from.
 */
export const serverAPI = {
  schema: (): Promise<Record<string, any>> => requestAPI('schema'),
  /** What `backend` (or the default one) offers, and which backends the server enables. */
  cluster: (backend?: string): Promise<Cluster> =>
    requestAPI<Cluster>(withBackend('cluster', backend)),
  repo: (path: string): Promise<Repo> =>
    requestAPI<Repo>(`repo?path=${encodeURIComponent(path)}`),
  metrics: (name: string): Promise<ReplicaMetrics[]> =>
    requestAPI<ReplicaMetrics[]>(jobPath(name, 'metrics')),
  /** What the job logs to its event files: one tag (default: its loss) per run, in its current run or `run`. */
  scalars: (name: string, tag?: string, run?: number): Promise<Scalars> =>
    requestAPI<Scalars>(jobPath(name, 'scalars') + queryString({ tag, run })),
  /** Where the running replicas are now (`kept`: when the job hung): their stacks, taken at once, compared. */
  stacks: (name: string, kept = false): Promise<Stacks> =>
    requestAPI<Stacks>(
      jobPath(name, 'stacks') + queryString({ kept: kept ? 'true' : undefined })
    ),
  /** Two jobs side by side: ends, spec fields, code diff, packages, image, metrics. */
  compare: (a: string, b: string): Promise<Comparison> =>
    requestAPI<Comparison>('jobs/compare' + queryString({ a, b })),
  /**
   * What runs used since `since` (a date or time, or a duration before now
   * such as "7d"; default: this month's start): per owner with their budget,
   * per sweep, and each run with its cost.
   */
  usage: (since?: string): Promise<UsageReport> =>
    requestAPI<UsageReport>('usage' + queryString({ since })),
  /** Why the job waits, if it does: a sentence and the numbers behind it. */
  waiting: (name: string): Promise<Waiting> =>
    requestAPI<Waiting>(jobPath(name, 'waiting')),
  /**
   * A sweep's trials with their hyperparameters and metric, best first: those
   * changed since the table's `version` the caller holds ('' for all), and
   * every trial's name in the table's `order` (see followTrials).
   */
  trials: (sweep: string, since: string): Promise<Trials> =>
    requestAPI<Trials>(
      jobPath(sweep, 'trials') + `?since=${encodeURIComponent(since)}`
    )
};

/**
 * Git credentials for private repositories, named by code.credentials: stored on
 * the server (a Secret on Kubernetes) for one git host, and never read back.
 */
export const secretsAPI = {
  names: async (backend?: string): Promise<string[]> =>
    (await requestAPI<{ name: string }[]>(withBackend('secrets', backend))).map(
      secret => secret.name
    ),
  store: (
    name: string,
    secret: { username: string; password: string; host: string },
    backend?: string
  ): Promise<void> =>
    requestAPI<void>(
      withBackend(`secrets/${encodeURIComponent(name)}`, backend),
      { method: 'PUT', body: JSON.stringify(secret) }
    )
};

/** This user's webhook, shown by its host only (its path often holds a token). */
export type Webhook =
  operations['getWebhook']['responses']['200']['content']['application/json'];

/**
 * Your webhook: your jobs' and sweeps' ends, hangs and stragglers posted to a
 * URL, kept on the server and never read back whole.
 */
export const webhookAPI = {
  get: (): Promise<Webhook> => requestAPI<Webhook>('webhook'),
  set: (url: string): Promise<void> =>
    requestAPI<void>('webhook', {
      method: 'PUT',
      body: JSON.stringify({ url })
    }),
  /** Post a test event: what failed, if anything. */
  test: async (): Promise<string[]> =>
    (await requestAPI<{ problems: string[] }>('webhook', { method: 'POST' }))
      .problems,
  remove: (): Promise<void> => requestAPI<void>('webhook', { method: 'DELETE' })
};

/** Whether a request failed because the job (or what it asked for) does not exist. */
export function isGone(error: unknown): boolean {
  return error instanceof APIError && error.response.status === 404;
}

/**
 * Whether the server refused a request for what it asked (a 4xx: no such job,
 * replica or run, ...), so that asking again gets the same answer.
 */
export function isRefused(error: unknown): error is APIError {
  const status = error instanceof APIError ? error.response.status : 0;
  return status >= 400 && status < 500;
}

/**
 * The field errors of a refused spec: each failing field for a 400, the name for a
 * 409 (taken: a submit's answer names no field; a check's verdict does, itself),
 * or one error without a path for anything else.
 */
export function fieldErrors(error: unknown): FieldError[] {
  if (error instanceof APIError) {
    if (error.response.status === 409) {
      return [{ path: 'name', message: error.message }];
    }
    if (error.errors.length) {
      return error.errors;
    }
  }
  return [{ path: '', message: (error as Error).message ?? String(error) }];
}

/**
 * Where the log file of a job (one replica, or all prefixed; one run, else the
 * latest) downloads from.
 */
export function logsDownloadURL(
  name: string,
  replica?: string,
  run?: number
): string {
  const settings = ServerConnection.makeSettings();
  const query = URLExt.objectToQueryString({
    download: 'true',
    timestamps: 'true',
    ...(replica ? { replica } : {}),
    ...(run !== undefined ? { run: String(run) } : {})
  });
  return (
    URLExt.join(settings.baseUrl, API_NAMESPACE, jobPath(name, 'logs')) + query
  );
}

/**
 * The live log stream of a job: one replica (else all), one run (else the
 * latest), resuming after `cursor` ("replica:offset,...").
 */
export function logStream(
  name: string,
  options: {
    replica?: string;
    cursor?: string;
    run?: number;
    tail?: number;
  } = {}
): WebSocket {
  const settings = ServerConnection.makeSettings();
  const token = settings.appendToken ? settings.token : undefined;
  const url =
    URLExt.join(settings.wsUrl, API_NAMESPACE, jobPath(name, 'logs/stream')) +
    queryString({ ...options, token });
  return new settings.WebSocket(url);
}

/**
 * The TensorBoard of one replica, or of the whole job with `replica` "all",
 * through the server's authenticated proxy.
 */
export function tensorboardURL(name: string, replica: string): string {
  const settings = ServerConnection.makeSettings();
  return URLExt.join(
    settings.baseUrl,
    'distrain/tensorboard',
    encodeURIComponent(name),
    encodeURIComponent(replica),
    '/'
  );
}
