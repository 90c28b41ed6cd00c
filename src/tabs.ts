/**
 * The main-area tabs of jobs: each knows the job (and replica) it shows, so it
 * is found again rather than opened twice, and restored after a reload.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { IFrame, MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import {
  LabIcon,
  lineFormIcon,
  listIcon,
  Toolbar
} from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { tensorboardURL } from './api';
import { CompareWidget } from './compare';
import { NewJobWidget } from './form/index';
import { shorten } from './format';
import { JobViewWidget } from './jobview';
import { LogsWidget } from './logs';
import { UsageWidget } from './usage';

export const NAMESPACE = 'jupyter-distrain';

export const distrainIcon = new LabIcon({
  name: 'jupyter-distrain:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<circle cx="12" cy="5" r="3"/><circle cx="5" cy="18" r="3"/><circle cx="19" cy="18" r="3"/>' +
    '<path d="M11 8h2v3.5l5.2 3.7-1.2 1.6-5-3.6-5 3.6-1.2-1.6L11 11.5z"/></g></svg>'
});

/**
 * A main-area tab that knows what it shows, for restoring it: a job's name (for a
 * new-job form, the notebook path) and a replica.
 *
 * Its toolbar, which has no items, is a plain one: MainAreaWidget's default
 * ReactiveToolbar answers being shown with a throttled resize that runs a tick
 * later and throws ("Cannot read properties of null (reading 'promise')") when the
 * tab was disposed meanwhile, as File > Close All Tabs does to the tab that
 * becomes current when the current one closes.
 */
export class JobTab<T extends Widget> extends MainAreaWidget<T> {
  constructor(
    content: T,
    readonly job: string,
    /** The replica shown, where the tab shows one at a time. */
    public replica = ''
  ) {
    super({ content, toolbar: new Toolbar() });
    this.title.icon = distrainIcon;
    this.title.closable = true;
    this.title.className = 'jp-distrain-tab';
  }

  /**
   * Label the tab: what it shows first (shortened in the middle), then its kind,
   * so a narrow tab keeps what tells it apart; the tooltip has it whole.
   */
  name(shown: string, kind = '', icon = distrainIcon): void {
    this.title.label = kind ? `${shorten(shown)} · ${kind}` : shorten(shown);
    this.title.caption = kind ? `${kind} of ${shown}` : shown;
    this.title.icon = icon;
  }
}

/** The tabs of each kind, for finding an open one and restoring them. */
export interface ITrackers {
  forms: WidgetTracker<JobTab<NewJobWidget>>;
  views: WidgetTracker<JobTab<JobViewWidget>>;
  logs: WidgetTracker<JobTab<LogsWidget>>;
  boards: WidgetTracker<JobTab<IFrame>>;
  /** Comparisons, each tab's job "a:b" (no job's name holds a colon). */
  compares: WidgetTracker<JobTab<CompareWidget>>;
  /** The usage report: one tab, its job "usage". */
  usage: WidgetTracker<JobTab<UsageWidget>>;
}

/** Show the tab `tracker` has for it, or add the one `create` makes. */
export function showTab<T extends Widget>(
  shell: JupyterFrontEnd.IShell,
  tracker: WidgetTracker<JobTab<T>>,
  found: (tab: JobTab<T>) => boolean,
  create: () => JobTab<T>
): JobTab<T> {
  let tab = tracker.find(found);
  if (!tab) {
    tab = create();
    void tracker.add(tab);
    shell.add(tab, 'main');
  }
  shell.activateById(tab.id);
  return tab;
}

/** A job's logs as a tab, labelled with the replica shown, which it saves as it changes. */
export function logsTab(
  tracker: WidgetTracker<JobTab<LogsWidget>>,
  name: string,
  replica: string
): JobTab<LogsWidget> {
  const view = new LogsWidget(name, replica);
  const tab = new JobTab(view, name);
  tab.id = `${NAMESPACE}-logs-${name}`;
  const label = () =>
    tab.name(view.replica ? `${name}/${view.replica}` : name, 'logs', listIcon);
  view.replicaChanged.connect(() => {
    label();
    void tracker.save(tab);
  });
  label();
  return tab;
}

/** Two jobs side by side as a tab. */
export function compareTab(a: string, b: string): JobTab<CompareWidget> {
  const tab = new JobTab(new CompareWidget(a, b), `${a}:${b}`);
  tab.id = `${NAMESPACE}-compare-${a}-${b}`;
  tab.name(`${a} ↔ ${b}`, 'compare');
  return tab;
}

/** The usage report as a tab. */
export function usageTab(): JobTab<UsageWidget> {
  const tab = new JobTab(new UsageWidget(), 'usage');
  tab.id = `${NAMESPACE}-usage`;
  tab.name('Usage');
  return tab;
}

/** The TensorBoard of a job's replica as a tab. */
export function tensorBoardTab(name: string, replica: string): JobTab<IFrame> {
  // TensorBoard is a page of this server's, whose scripts read its data from
  // this origin: a sandbox allowing both would be none, so there is none.
  const frame = new IFrame();
  frame.node.querySelector('iframe')?.removeAttribute('sandbox');
  const tab = new JobTab(frame, name);
  tab.id = `${NAMESPACE}-tensorboard-${name}`;
  showBoard(tab, replica);
  return tab;
}

/** Show the TensorBoard of another replica of the tab's job. */
export function showBoard(tab: JobTab<IFrame>, replica: string): void {
  const shown = replica === 'all' ? tab.job : `${tab.job}/${replica}`;
  tab.replica = replica;
  tab.content.url = tensorboardURL(tab.job, replica);
  tab.content.node.querySelector('iframe')!.title = `TensorBoard of ${shown}`;
  tab.name(shown, 'TensorBoard', lineFormIcon);
}
