// The metrics-server that serves the real node's cluster its metrics API (metrics.k8s.io), started and aggregated
// by cluster.py: the module's own command, built from the version pinned in go.mod.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/logs"
	"sigs.k8s.io/metrics-server/cmd/metrics-server/app"
)

func main() {
	logs.InitLogs()
	defer logs.FlushLogs()
	if err := app.NewMetricsServerCommand(genericapiserver.SetupSignalHandler()).Execute(); err != nil {
		logs.FlushLogs()
		os.Exit(1)
	}
}
