"""The local web page of `agent serve` (issue 25)."""
