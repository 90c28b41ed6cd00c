import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  InputDialog,
  WidgetTracker
} from '@jupyterlab/apputils';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import {
  bellIcon,
  SidePanel,
  spreadsheetIcon
} from '@jupyterlab/ui-components';

import { sidebarButton } from './components';
// Not './form': a lib/form.js left by a build before the split would win.
import { NewJobWidget } from './form/index';
import { JobsModel, JobsWidget, newJobButton } from './jobs';
import { JobViewWidget } from './jobview';
import { askBrowser } from './notify';
import {
  compareTab,
  distrainIcon,
  ITrackers,
  JobTab,
  logsTab,
  NAMESPACE,
  showBoard,
  showTab,
  tensorBoardTab,
  usageTab
} from './tabs';
import { showWebhookDialog } from './webhook';

/**
 * Plugin identifier; also the settings schema id (`schema/plugin.json`).
 */
const PLUGIN_ID = 'jupyter-distrain:plugin';
const PANEL_ID = 'jupyter-distrain-panel';
const JOB_PARAMETER = 'distrain-job'; // a link's job: lab?distrain-job=NAME

export const CommandIDs = {
  open: 'distrain:open',
  newJob: 'distrain:new-job',
  trainNotebook: 'distrain:train-notebook',
  openJob: 'distrain:open-job',
  webhook: 'distrain:webhook',
  openLogs: 'distrain:open-logs',
  openTensorBoard: 'distrain:open-tensorboard',
  compare: 'distrain:compare',
  usage: 'distrain:usage'
} as const;

/** What the commands share: the app, the jobs, the tabs, and the settings as they are now. */
interface IContext {
  app: JupyterFrontEnd;
  model: JobsModel;
  trackers: ITrackers;
  settings: {
    /** How often to refresh, in milliseconds. */
    interval: number;
    /** The backend a new job's form starts on; empty: the server's default. */
    defaultBackend: string;
  };
}

/**
 * The distributed-training sidebar and its tabs: new job, job view, logs and
 * TensorBoard, all restored after a reload.
 */
function activate(
  app: JupyterFrontEnd,
  settingRegistry: ISettingRegistry | null,
  restorer: ILayoutRestorer | null,
  palette: ICommandPalette | null,
  launcher: ILauncher | null,
  browser: IDefaultFileBrowser | null
): void {
  const settings = { interval: 2000, defaultBackend: '' };
  const context: IContext = {
    app,
    model: new JobsModel(settings.interval),
    trackers: {
      forms: new WidgetTracker({ namespace: `${NAMESPACE}-new-job` }),
      views: new WidgetTracker({ namespace: `${NAMESPACE}-job` }),
      logs: new WidgetTracker({ namespace: `${NAMESPACE}-logs` }),
      boards: new WidgetTracker({ namespace: `${NAMESPACE}-tensorboard` }),
      compares: new WidgetTracker({ namespace: `${NAMESPACE}-compare` }),
      usage: new WidgetTracker({ namespace: `${NAMESPACE}-usage` })
    },
    settings
  };
  addSidebar(context, restorer);
  addNewJobCommands(context, browser);
  addOpenJobCommand(context);
  addOpenLogsCommand(context);
  addOpenTensorBoardCommand(context);
  addCompareCommand(context);
  addUsageCommand(context);
  if (restorer) {
    restoreTabs(restorer, context.trackers);
  }
  addLaunchItems(app, palette, launcher);
  void app.restored.then(() => openLinkedJob(context));
  if (settingRegistry) {
    followSettings(settingRegistry, context);
  }
}

/** The sidebar: the jobs list with a "New job" button, and the command that shows it. */
function addSidebar(context: IContext, restorer: ILayoutRestorer | null): void {
  const { commands, shell } = context.app;
  const panel = new SidePanel();
  panel.id = PANEL_ID;
  panel.title.icon = distrainIcon;
  panel.title.caption = 'Distributed training';
  panel.addWidget(
    new JobsWidget(
      context.model,
      job => void commands.execute(CommandIDs.openJob, { name: job.name }),
      job => void commands.execute(CommandIDs.newJob, { clone: job.name })
    )
  );
  panel.toolbar.addItem(
    'new-job',
    newJobButton(() => void commands.execute(CommandIDs.newJob))
  );
  panel.toolbar.addItem(
    'usage',
    sidebarButton(
      'Usage',
      'What your runs used, and what is left of your budget',
      spreadsheetIcon,
      () => void commands.execute(CommandIDs.usage)
    )
  );
  panel.toolbar.addItem(
    'webhook',
    sidebarButton(
      'Webhook',
      'Notify a webhook when your jobs end, hang or straggle',
      bellIcon,
      () => void commands.execute(CommandIDs.webhook)
    )
  );
  shell.add(panel, 'left', { rank: 650 });
  restorer?.add(panel, PANEL_ID);

  commands.addCommand(CommandIDs.open, {
    label: 'Show Training Jobs',
    icon: distrainIcon,
    execute: () => shell.activateById(PANEL_ID)
  });
  commands.addCommand(CommandIDs.webhook, {
    label: 'Training Jobs Webhook…',
    execute: showWebhookDialog
  });
}

/**
 * Open the job a link names (lab?distrain-job=NAME, the link webhooks carry),
 * then drop the parameter from the address.
 */
function openLinkedJob(context: IContext): void {
  const url = new URL(window.location.href);
  const name = url.searchParams.get(JOB_PARAMETER);
  if (!name) {
    return;
  }
  url.searchParams.delete(JOB_PARAMETER);
  window.history.replaceState(window.history.state, '', url.toString());
  void context.app.commands.execute(CommandIDs.open);
  void context.app.commands.execute(CommandIDs.openJob, { name });
}

/**
 * The new-job form's command, for the code around a notebook or directory, a
 * clone or a fine-tune; and "Train this notebook's repo…", for the notebook
 * chosen in the file browser or in focus.
 */
function addNewJobCommands(
  context: IContext,
  browser: IDefaultFileBrowser | null
): void {
  const { commands, shell } = context.app;

  /** The notebook in focus, else the file browser's directory. */
  const currentPath = (): string => {
    const path = (shell.currentWidget as any)?.context?.path;
    if (typeof path === 'string' && path.endsWith('.ipynb')) {
      return path;
    }
    return browser?.model.path ?? '';
  };

  commands.addCommand(CommandIDs.newJob, {
    label: args => (args.isLauncher ? 'Training Job' : 'New Training Job…'),
    caption:
      "Configure a training job for the code around a notebook, a copy of a job (clone), or a fine-tune of a sweep's best trial",
    icon: distrainIcon,
    execute: args => {
      const clone = args.clone as string | undefined;
      const finetune = args.finetune as string | undefined;
      const path =
        clone || finetune
          ? ''
          : ((args.path ?? args.cwd ?? currentPath()) as string);
      // A form's tab is the notebook's or directory's, the cloned job's or the fine-tuned sweep's.
      const key = clone
        ? `clone:${clone}`
        : finetune
          ? `finetune:${finetune}`
          : `path:${path}`;
      return showTab(
        shell,
        context.trackers.forms,
        tab => tab.job === key,
        () => newJobTab(context, key, { path, clone, finetune })
      );
    }
  });

  commands.addCommand(CommandIDs.trainNotebook, {
    label: "Train this notebook's repo…",
    icon: distrainIcon,
    execute: () => {
      // The notebook chosen in the file browser's menu, else the one in focus
      // (whatever the file browser has selected).
      const listed = context.app.contextMenuHitTest(node =>
        node.classList.contains('jp-DirListing-item')
      );
      const selected = listed && browser?.selectedItems().next();
      const path =
        selected && !selected.done && selected.value.type === 'notebook'
          ? selected.value.path
          : currentPath();
      return commands.execute(CommandIDs.newJob, { path });
    }
  });
}

/** A new-job form's tab; a submitted job's form closes, and its view (its logs inside) opens. */
function newJobTab(
  context: IContext,
  key: string,
  source: { path: string; clone?: string; finetune?: string }
): JobTab<NewJobWidget> {
  const { app, model, settings } = context;
  const { commands } = app;
  const { path, clone, finetune } = source;
  const form = new NewJobWidget({
    ...source,
    backend: settings.defaultBackend,
    contents: app.serviceManager.contents,
    onSubmitted: job => {
      if (model.browserNotifications) {
        askBrowser(); // once: whether the page may tell of this job's end while hidden
      }
      tab.dispose();
      void model.poll.refresh();
      void commands.execute(CommandIDs.openJob, { name: job.name });
    }
  });
  const tab = new JobTab(form, key);
  tab.id = `${NAMESPACE}-new-job-${key}`;
  if (clone) {
    tab.name(clone, 'clone');
  } else if (finetune) {
    tab.name(finetune, 'fine-tune');
  } else {
    tab.name(path.split('/').pop() || 'root', 'new job');
    tab.title.caption = `New job for ${path || 'the root directory'}`;
  }
  return tab;
}

/** The command that opens a job's view. */
function addOpenJobCommand(context: IContext): void {
  const { commands, shell } = context.app;
  commands.addCommand(CommandIDs.openJob, {
    label: args => `Open Training Job ${args.name ?? ''}`,
    execute: args => {
      const name = args.name as string;
      return showTab(
        shell,
        context.trackers.views,
        tab => tab.job === name,
        () => jobViewTab(context, name)
      );
    }
  });
}

/**
 * A job's view as a tab, whose links open its logs, TensorBoards, clones and
 * trials; it closes once the job is deleted.
 */
function jobViewTab(context: IContext, name: string): JobTab<JobViewWidget> {
  const { model, settings } = context;
  const { commands } = context.app;
  const view = new JobViewWidget(name, {
    interval: settings.interval,
    openLogs: (job, replica) =>
      void commands.execute(CommandIDs.openLogs, { name: job, replica }),
    openTensorBoard: (job, replica) =>
      void commands.execute(CommandIDs.openTensorBoard, { name: job, replica }),
    onClone: job =>
      void commands.execute(CommandIDs.newJob, { clone: job.name }),
    onFinetune: sweep =>
      void commands.execute(CommandIDs.newJob, { finetune: sweep }),
    openJob: job => void commands.execute(CommandIDs.openJob, { name: job }),
    onCompare: job => void commands.execute(CommandIDs.compare, { a: job }),
    onDeleted: () => {
      tab.dispose();
      void model.poll.refresh();
    }
  });
  const tab = new JobTab(view, name);
  tab.id = `${NAMESPACE}-job-${name}`;
  tab.name(name);
  return tab;
}

/**
 * The command that opens a job's logs tab (one a job), showing the replica
 * asked for, if any, and the latest run.
 */
function addOpenLogsCommand(context: IContext): void {
  const { commands, shell } = context.app;
  const { logs } = context.trackers;
  commands.addCommand(CommandIDs.openLogs, {
    label: args => `Logs of ${args.name ?? 'a training job'}`,
    execute: args => {
      const name = args.name as string;
      const replica = (args.replica as string) ?? '';
      const tab = showTab(
        shell,
        logs,
        tab => tab.job === name,
        () => logsTab(logs, name, replica)
      );
      if (tab.content.replica !== replica && args.replica !== undefined) {
        tab.content.choose(replica);
      }
      tab.content.showRun(undefined); // asked for the logs: the latest run's
    }
  });
}

/**
 * The command that opens a job's TensorBoard tab (one a job), showing the
 * replica asked for ('all': all of them).
 */
function addOpenTensorBoardCommand(context: IContext): void {
  const { commands, shell } = context.app;
  const { boards } = context.trackers;
  commands.addCommand(CommandIDs.openTensorBoard, {
    label: args =>
      `TensorBoard of ${args.name ?? 'a training job'}${args.replica ? `/${args.replica}` : ''}`,
    execute: args => {
      const name = args.name as string;
      const replica = (args.replica as string) || 'all';
      const tab = showTab(
        shell,
        boards,
        tab => tab.job === name,
        () => tensorBoardTab(name, replica)
      );
      if (tab.replica !== replica) {
        showBoard(tab, replica);
        void boards.save(tab);
      }
    }
  });
}

/**
 * The command that shows two jobs side by side (one tab a pair); without `b`,
 * it asks which job to compare `a` with.
 */
function addCompareCommand(context: IContext): void {
  const { commands, shell } = context.app;
  commands.addCommand(CommandIDs.compare, {
    label: args => `Compare ${args.a ?? 'a training job'} with…`,
    execute: async args => {
      const a = args.a as string;
      const b = (args.b as string | undefined) || (await otherJob(context, a));
      if (b) {
        showTab(
          shell,
          context.trackers.compares,
          tab => tab.job === `${a}:${b}`,
          () => compareTab(a, b)
        );
      }
    }
  });
}

/** The command that shows what runs used (one tab). */
function addUsageCommand(context: IContext): void {
  const { commands, shell } = context.app;
  commands.addCommand(CommandIDs.usage, {
    label: 'Show Training Usage',
    execute: () => {
      showTab(shell, context.trackers.usage, () => true, usageTab);
    }
  });
}

/**
 * The job the user picks among the others of the list to compare `a` with,
 * or an earlier run of `a` (NAME@RUN); null if none.
 */
async function otherJob(context: IContext, a: string): Promise<string | null> {
  const runs = context.model.jobs.find(job => job.name === a)?.run ?? 1;
  const earlier = Array.from({ length: runs - 1 }, (_, i) => `${a}@${i + 1}`);
  const { value } = await InputDialog.getItem({
    title: `Compare ${a} with`,
    items: [
      ...earlier,
      ...context.model.jobs.map(job => job.name).filter(name => name !== a)
    ],
    label: 'The other job, or an earlier run of this one'
  });
  return value;
}

/** Reopen, after a reload, the tabs that were open, each by its command. */
function restoreTabs(restorer: ILayoutRestorer, trackers: ITrackers): void {
  void restorer.restore(trackers.forms, {
    command: CommandIDs.newJob,
    args: tab => {
      const [source, ...rest] = tab.job.split(':');
      return { [source]: rest.join(':') };
    },
    // never empty (the restorer skips a tab named ''): "path:" for the root's form
    name: tab => tab.job
  });
  void restorer.restore(trackers.views, {
    command: CommandIDs.openJob,
    args: tab => ({ name: tab.job }),
    name: tab => tab.job
  });
  void restorer.restore(trackers.logs, {
    command: CommandIDs.openLogs,
    args: tab => ({ name: tab.job, replica: tab.content.replica }),
    name: tab => tab.job
  });
  void restorer.restore(trackers.compares, {
    command: CommandIDs.compare,
    args: tab => ({ a: tab.content.a, b: tab.content.b }),
    name: tab => tab.job
  });
  void restorer.restore(trackers.usage, {
    command: CommandIDs.usage,
    name: () => 'usage'
  });
  void restorer.restore(trackers.boards, {
    command: CommandIDs.openTensorBoard,
    args: tab => ({ name: tab.job, replica: tab.replica }),
    name: tab => tab.job
  });
}

/** The commands' places in the palette, the launcher and the notebooks' context menus. */
function addLaunchItems(
  app: JupyterFrontEnd,
  palette: ICommandPalette | null,
  launcher: ILauncher | null
): void {
  for (const command of [
    CommandIDs.open,
    CommandIDs.newJob,
    CommandIDs.usage,
    CommandIDs.webhook
  ]) {
    palette?.addItem({ command, category: 'Distributed Training' });
  }
  launcher?.add({
    command: CommandIDs.newJob,
    category: 'Other',
    rank: 1,
    args: { isLauncher: true }
  });
  for (const selector of [
    '.jp-DirListing-item[data-file-type="notebook"]',
    '.jp-Notebook'
  ]) {
    app.contextMenu.addItem({
      command: CommandIDs.trainNotebook,
      selector,
      rank: 20
    });
  }
}

/** Keep the refresh interval, the default backend and the browser's notifications as the settings say, now and as they change. */
function followSettings(
  settingRegistry: ISettingRegistry,
  context: IContext
): void {
  settingRegistry
    .load(PLUGIN_ID)
    .then(loaded => {
      const update = () => {
        const { settings, model } = context;
        settings.interval = loaded.get('refreshInterval').composite as number;
        model.interval = settings.interval;
        settings.defaultBackend = loaded.get('defaultBackend')
          .composite as string;
        model.browserNotifications = loaded.get('browserNotifications')
          .composite as boolean;
      };
      update();
      loaded.changed.connect(update);
    })
    .catch(reason => {
      console.warn('jupyter-distrain: could not load settings', reason);
    });
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'Launch and manage model training, single-machine or distributed, from JupyterLab',
  autoStart: true,
  optional: [
    ISettingRegistry,
    ILayoutRestorer,
    ICommandPalette,
    ILauncher,
    IDefaultFileBrowser
  ],
  activate
};

export default plugin;
