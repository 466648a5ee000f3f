"""Files, below everything else: the one safe reader (no link out of the vault, no FIFO,
size limits, UTF-8 named when it is not), atomic writes, and the paths the agent keeps
off limits. No git, no formats, no model."""
