import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

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
