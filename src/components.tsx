/**
 * What the views share: a job's phase as a badge and the buttons for what can be
 * done to it (the job list and the job view), a table's head, the sidebar's icon
 * buttons.
 */
import {
  Dialog,
  ReactWidget,
  showDialog,
  showErrorMessage
} from '@jupyterlab/apputils';
import {
  copyIcon,
  deleteIcon,
  LabIcon,
  refreshIcon,
  stopIcon
} from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { JobSummary, jobsAPI, Phase } from './api';
import { FINISHED } from './format';
import { restartCode } from './form/pinned';

export type Action = 'stop' | 'restart' | 'clone' | 'delete';

/** What an action asks before it is done; actions without one are done at once. */
const CONFIRM: Partial<
  Record<Action, (job: JobSummary) => Partial<Dialog.IOptions<any>>>
> = {
  stop: job => ({
    title: `Stop ${job.name}?`,
    body: 'Its replicas are stopped; its logs and output are kept, and Restart runs it again.',
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Stop' })]
  }),
  delete: job => ({
    title: `Delete ${job.name}?`,
    body: 'Its logs are deleted too; its output directory is kept.',
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
  })
};

/**
 * Restart a job, saying first what code it runs where that is not its ref as
 * it is now: a commit its branch has moved on from (offering the branch as it
 * is now), a snapshot of changes, a directory's files.
 */
async function restart(job: JobSummary): Promise<void> {
  const code = restartCode(job.name, await jobsAPI.code(job.name));
  if (!code.asks) {
    await jobsAPI.restart(job.name);
    return;
  }
  const { button } = await showDialog({
    title: `Restart ${job.name}?`,
    body: code.said,
    buttons: [
      Dialog.cancelButton(),
      ...(code.repin
        ? [Dialog.okButton({ label: code.repin, displayType: 'default' })]
        : []),
      Dialog.okButton({ label: code.same })
    ]
  });
  if (button.accept) {
    await jobsAPI.restart(job.name, button.label === code.repin);
  }
}

/**
 * Carry out an action on a job, asking first where it cannot be undone;
 * errors are shown. Restarting says what code runs; cloning opens the new-job
 * form (`onClone`). Answers whether it was done.
 */
async function act(
  action: Action,
  job: JobSummary,
  onClone: (job: JobSummary) => void
): Promise<boolean> {
  const confirm = CONFIRM[action];
  if (confirm && !(await showDialog(confirm(job))).button.accept) {
    return false;
  }
  try {
    if (action === 'clone') {
      onClone(job);
    } else if (action === 'restart') {
      await restart(job);
    } else {
      await (action === 'delete' ? jobsAPI.remove : jobsAPI[action])(job.name);
    }
    return true;
  } catch (error) {
    await showErrorMessage(`Could not ${action} ${job.name}`, error as Error);
    return false;
  }
}

const ACTIONS: {
  action: Action;
  label: string;
  icon: typeof stopIcon;
  when: (job: JobSummary) => boolean;
}[] = [
  {
    action: 'stop',
    label: 'Stop',
    icon: stopIcon,
    when: job => !FINISHED.has(job.phase)
  },
  { action: 'restart', label: 'Restart', icon: refreshIcon, when: () => true },
  {
    action: 'clone',
    label: 'Clone and edit',
    icon: copyIcon,
    when: () => true
  },
  { action: 'delete', label: 'Delete', icon: deleteIcon, when: () => true }
];

/**
 * A phase as a coloured badge.
 */
export function PhaseBadge(props: {
  phase: Phase;
  title?: string;
}): JSX.Element {
  return (
    <span
      className={`jp-distrain-phase jp-distrain-phase-${props.phase.toLowerCase()}`}
      title={props.title}
    >
      {props.phase}
    </span>
  );
}

/**
 * The buttons for what can be done to a job now; `after` runs once an action
 * was tried, with the action done (none where it was cancelled or failed).
 */
export function JobActions(props: {
  job: JobSummary;
  after: (done: Action | null) => Promise<void>;
  onClone: (job: JobSummary) => void;
}): JSX.Element {
  const { job } = props;
  return (
    <span className="jp-distrain-actions">
      {ACTIONS.filter(a => a.when(job)).map(a => (
        <button
          key={a.action}
          className="jp-Button jp-mod-minimal jp-distrain-action"
          title={`${a.label} ${job.name}`}
          aria-label={`${a.label} ${job.name}`}
          onClick={() =>
            void act(a.action, job, props.onClone).then(done =>
              props.after(done ? a.action : null)
            )
          }
        >
          <a.icon.react tag="span" elementSize="small" />
        </button>
      ))}
    </span>
  );
}

/**
 * A table that scrolls sideways in a narrow panel (and down, where its class
 * limits its height): a named region the keyboard can scroll.
 */
export const ScrollingTable = React.forwardRef<
  HTMLDivElement,
  { label: string; className?: string; children: React.ReactNode }
>((props, ref) => {
  return (
    <div
      className={`jp-distrain-table-scroll ${props.className ?? ''}`}
      role="region"
      aria-label={props.label}
      tabIndex={0}
      ref={ref}
    >
      {props.children}
    </div>
  );
});

/** A table's head row: a column header each. */
export function Head(props: { columns: string[] }): JSX.Element {
  return (
    <thead>
      <tr>
        {props.columns.map(column => (
          <th key={column} scope="col">
            {column}
          </th>
        ))}
      </tr>
    </thead>
  );
}

/**
 * An icon button of the sidebar's toolbar: a plain button (JupyterLab's toolbar
 * button says whether it is pressed, which a button that toggles nothing must not).
 */
export function sidebarButton(
  name: string,
  title: string,
  icon: LabIcon,
  onClick: () => void
): Widget {
  return ReactWidget.create(
    <button
      className={`jp-Button jp-mod-styled jp-mod-minimal jp-distrain-${name.toLowerCase()}-button`}
      title={title}
      aria-label={name}
      onClick={onClick}
    >
      <icon.react tag="span" elementSize="small" />
    </button>
  );
}
