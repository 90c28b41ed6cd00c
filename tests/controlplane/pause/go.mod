module jupyter-distrain/controlplane/pause

go 1.26.0
