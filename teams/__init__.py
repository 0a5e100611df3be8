"""Teams of users, the deployments they own and their quotas (GPUs held, GPU-hours a month)."""
