"""``python -m kcp_opa`` is the ``kcp-opa`` command."""

from kcp_opa.cli import main

main()
