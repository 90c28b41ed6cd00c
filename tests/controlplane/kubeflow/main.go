// The Kubeflow Training Operator's TFJob, PyTorchJob and PaddleJob controllers and validating webhooks,
// set up as its own main sets them up, with one difference: the webhooks serve the test control plane's
// certificate on loopback (as the operator does behind cert-manager) instead of generating a CA into a
// Secret and a fixed directory under /tmp. Of the operator's own flags it takes the PyTorchJob workers' init
// container image (a real node has no registry to pull the default from).
package main

import (
	"flag"
	"os"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/kubeflow/training-operator/pkg/config"
	controllerv1 "github.com/kubeflow/training-operator/pkg/controller.v1"
	"github.com/kubeflow/training-operator/pkg/controller.v1/common"
	"github.com/kubeflow/training-operator/pkg/webhooks"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

func main() {
	var certDir string
	var port int
	flag.StringVar(&certDir, "cert-dir", "", "directory holding tls.crt and tls.key for the webhooks")
	flag.IntVar(&port, "webhook-port", 9443, "loopback port of the webhooks")
	flag.StringVar(&config.Config.PyTorchInitContainerImage, "pytorch-init-container-image",
		config.PyTorchInitContainerImageDefault, "the image of the init container in which PyTorchJob workers wait for their master")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	config.Config.PyTorchInitContainerTemplateFile = config.PyTorchInitContainerTemplateFileDefault
	config.Config.PyTorchInitContainerMaxTries = config.PyTorchInitContainerMaxTriesDefault

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kubeflowv1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir}),
	})
	must(err)
	for _, kind := range []string{kubeflowv1.TFJobKind, kubeflowv1.PyTorchJobKind, kubeflowv1.PaddleJobKind} {
		must(controllerv1.SupportedSchemeReconciler[kind](mgr, common.GenNonGangSchedulerSetupFunc(), 1))
		must(webhooks.SupportedSchemeWebhook[kind](mgr))
	}
	must(mgr.Start(ctrl.SetupSignalHandler()))
}

func must(err error) {
	if err != nil {
		ctrl.Log.Error(err, "training operator")
		os.Exit(1)
	}
}
