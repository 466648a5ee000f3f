"""Sync through git remotes, above the vault and the formats: fetch, merge with the
formats' own merge drivers, hold what a remote may not change by itself (agent.toml,
skills, heartbeats, delivery targets), check incoming trees, push (`remotes`)."""
