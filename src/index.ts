import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { requestAPI } from './api';

/**
 * Plugin identifier; also the settings schema id (`schema/plugin.json`).
 */
const PLUGIN_ID = 'jupyter-distrain:plugin';

/**
 * Answer of `GET <baseUrl>/distrain/api/version`.
 */
export interface IVersionInfo {
  version?: string;
  [key: string]: unknown;
}

/**
 * Initialization data for the jupyter-distrain extension.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'Launch and manage model training, single-machine or distributed, from JupyterLab',
  autoStart: true,
  optional: [ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null
  ): void => {
    console.log('jupyter-distrain is activated');

    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          console.debug(
            'jupyter-distrain settings loaded:',
            settings.composite
          );
        })
        .catch(reason => {
          console.warn('jupyter-distrain: failed to load settings.', reason);
        });
    }

    requestAPI<IVersionInfo>('version')
      .then(data => {
        console.log(
          `jupyter-distrain server extension version: ${data?.version ?? 'unknown'}`,
          data
        );
      })
      .catch(reason => {
        console.warn(
          'jupyter-distrain: the server extension is not reachable ' +
            '(GET distrain/api/version failed); is `jupyter_distrain` ' +
            'enabled as a Jupyter server extension?',
          reason
        );
      });
  }
};

export default plugin;
