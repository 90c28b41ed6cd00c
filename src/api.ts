import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { components } from './openapi';

/**
 * URL namespace of the jupyter-distrain server extension REST API.
 */
export const API_NAMESPACE = 'distrain/api';

/**
 * Call the jupyter-distrain server extension.
 *
 * @param endPoint - API path relative to `<baseUrl>/distrain/api/`
 * @param init - Initial values for the request (method, body, headers...)
 * @param settings - Server connection settings (defaults to the page settings)
 * @returns The decoded JSON body of the response (or the raw text if it is
 *   not JSON, or `undefined` for an empty body)
 * @throws ServerConnection.NetworkError if the server cannot be reached
 * @throws ServerConnection.ResponseError on a non-2xx answer
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
    const message =
      data && typeof data === 'object' && 'message' in data
        ? String(data.message)
        : undefined;
    throw new ServerConnection.ResponseError(response, message);
  }

  return data as T;
}

/**
 * Types of the REST API, generated from its OpenAPI document (`jlpm build:api`).
 */
export type Job = components['schemas']['Job'];
export type Replica = components['schemas']['Replica'];
export type JobSpec = components['schemas']['JobSpec'];
export type Phase = components['schemas']['Phase'];

/** Phases after which a job changes no more. */
export const FINISHED: ReadonlySet<Phase> = new Set([
  'Succeeded',
  'Failed',
  'Stopped',
  'Lost'
]);

function jobPath(name: string, action?: string): string {
  return `jobs/${encodeURIComponent(name)}` + (action ? `/${action}` : '');
}

/**
 * The job operations of the REST API.
 */
export const jobsAPI = {
  list: (): Promise<Job[]> => requestAPI<Job[]>('jobs'),
  get: (name: string): Promise<Job> => requestAPI<Job>(jobPath(name)),
  submit: (spec: JobSpec): Promise<Job> =>
    requestAPI<Job>('jobs', { method: 'POST', body: JSON.stringify(spec) }),
  stop: (name: string): Promise<Job> =>
    requestAPI<Job>(jobPath(name, 'stop'), { method: 'POST' }),
  restart: (name: string): Promise<Job> =>
    requestAPI<Job>(jobPath(name, 'restart'), { method: 'POST' }),
  clone: (name: string): Promise<Job> =>
    requestAPI<Job>(jobPath(name, 'clone'), { method: 'POST' }),
  remove: (name: string): Promise<void> =>
    requestAPI<void>(jobPath(name), { method: 'DELETE' })
};
