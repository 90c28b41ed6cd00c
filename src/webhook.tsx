import { Dialog, ReactWidget, showDialog } from '@jupyterlab/apputils';
import * as React from 'react';

import { fieldErrors, Webhook, webhookAPI } from './api';

/**
 * Your webhook: set, tested and removed; shown by its host only. Jobs
 * submitted or restarted after a change post to the URL of then.
 */
function WebhookForm(): JSX.Element {
  const [current, setCurrent] = React.useState<Webhook | null>(null);
  const [url, setUrl] = React.useState('');
  const [said, setSaid] = React.useState('');
  const reload = async () => setCurrent(await webhookAPI.get());
  React.useEffect(() => {
    reload().catch(error => setSaid(fieldErrors(error)[0].message));
  }, []);
  const act = async (action: () => Promise<string>) => {
    try {
      setSaid(await action());
      await reload();
    } catch (error) {
      setSaid(fieldErrors(error)[0].message);
    }
  };
  const save = async () => {
    await webhookAPI.set(url);
    setUrl('');
    return 'Saved: the jobs you submit or restart from now on post to it.';
  };
  const test = async () => {
    const problems = await webhookAPI.test();
    return problems.length
      ? problems.join('; ')
      : 'A test event was delivered.';
  };
  const remove = async () => {
    await webhookAPI.remove();
    return 'Removed.';
  };
  return (
    <form
      className="jp-distrain-webhook"
      onSubmit={event => {
        event.preventDefault();
        void act(save);
      }}
    >
      <p>
        When a job or sweep of yours ends, hangs or straggles, a JSON POST tells
        this URL, whether or not JupyterLab runs.{' '}
        {current === null
          ? ''
          : current.url
            ? `Yours: ${current.url}`
            : 'You have none.'}
        {current?.admin
          ? " Every job's events also go to the administrator's webhook."
          : ''}
      </p>
      <label>
        Webhook URL{' '}
        <input
          type="password"
          className="jp-mod-styled"
          autoComplete="off"
          placeholder="https://hooks.example.org/..."
          value={url}
          onChange={event => setUrl(event.target.value)}
        />
      </label>
      <div className="jp-distrain-webhook-actions">
        <button
          type="submit"
          className="jp-Button jp-mod-styled jp-mod-accept"
          disabled={!url}
        >
          Save
        </button>
        <button
          type="button"
          className="jp-Button jp-mod-styled"
          disabled={!current?.url}
          onClick={() => void act(test)}
        >
          Send a test
        </button>
        <button
          type="button"
          className="jp-Button jp-mod-styled jp-mod-warn"
          disabled={!current?.url}
          onClick={() => void act(remove)}
        >
          Remove
        </button>
      </div>
      <p role="status" className="jp-distrain-webhook-said">
        {said}
      </p>
    </form>
  );
}

/** The webhook's dialog. */
export function showWebhookDialog(): Promise<unknown> {
  return showDialog({
    title: 'Webhook',
    body: ReactWidget.create(<WebhookForm />),
    buttons: [Dialog.cancelButton({ label: 'Close' })]
  });
}
