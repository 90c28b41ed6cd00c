"""Backends run jobs: `local` (processes on this machine) and `kubernetes` (pods in a namespace), each
keeping the contract of base.Backend; c.Distrain.backend_classes names them."""
