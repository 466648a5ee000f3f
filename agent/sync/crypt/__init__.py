"""Encrypted sync remotes: a host that stores the vault and can read none of it.

`agent remote add NAME URL --encrypt` configures the remote as `agent-crypt::URL`; git
then runs `helper` (gitremote-helpers(7)) for every fetch and push, so the sync, the
proposal branches, a forget's leased push and `agent clone` work unchanged. `remote`
reads, checks, fetches from and pushes to the host's carrier repository
(agent.vault.carrier); `manifest` is the sealed record of what it holds; `keys` is this
machine's key, kept under the person's home; `vaultremotes` and `cloning` are what
`agent remote` and `agent clone` need. docs/sync.md says what the host still sees.
"""
