import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { LabIcon, SidePanel } from '@jupyterlab/ui-components';

import { JobsModel, JobsWidget } from './jobs';

/**
 * Plugin identifier; also the settings schema id (`schema/plugin.json`).
 */
const PLUGIN_ID = 'jupyter-distrain:plugin';
const PANEL_ID = 'jupyter-distrain-panel';
const OPEN_COMMAND = 'distrain:open';

export const distrainIcon = new LabIcon({
  name: 'jupyter-distrain:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<circle cx="12" cy="5" r="3"/><circle cx="5" cy="18" r="3"/><circle cx="19" cy="18" r="3"/>' +
    '<path d="M11 8h2v3.5l5.2 3.7-1.2 1.6-5-3.6-5 3.6-1.2-1.6L11 11.5z"/></g></svg>'
});

/**
 * The distributed-training sidebar: the jobs of this server, live.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'Launch and manage model training, single-machine or distributed, from JupyterLab',
  autoStart: true,
  optional: [ISettingRegistry, ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): void => {
    const model = new JobsModel(2000);
    const panel = new SidePanel();
    panel.id = PANEL_ID;
    panel.title.icon = distrainIcon;
    panel.title.caption = 'Distributed training';
    panel.addWidget(new JobsWidget(model));
    app.shell.add(panel, 'left', { rank: 650 });
    restorer?.add(panel, PANEL_ID);

    app.commands.addCommand(OPEN_COMMAND, {
      label: 'Show Training Jobs',
      icon: distrainIcon,
      execute: () => app.shell.activateById(PANEL_ID)
    });
    palette?.addItem({
      command: OPEN_COMMAND,
      category: 'Distributed Training'
    });

    settingRegistry
      ?.load(PLUGIN_ID)
      .then(settings => {
        const update = () => {
          model.interval = settings.get('refreshInterval').composite as number;
        };
        update();
        settings.changed.connect(update);
      })
      .catch(reason => {
        console.warn('jupyter-distrain: could not load settings', reason);
      });
  }
};

export default plugin;
