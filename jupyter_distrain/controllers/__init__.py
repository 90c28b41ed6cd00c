"""The controllers this product runs in the cluster, each the command of a pod made with the product's image
(c.Distrain.controller_image): `python -m jupyter_distrain.controllers.sweep` runs a sweep's trials (the
sweeper's Job), `python -m jupyter_distrain.controllers.janitor` deletes the jobs past their time to be kept (the
namespace's CronJob). Each acts through the Kubernetes backend, whether or not a Jupyter server runs."""
