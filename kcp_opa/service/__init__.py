"""The gate as a service: an MCP server and an HTTP JSON API over the whole pipeline.

It sits above every stage (decide, authorize, execute, trail) and below the CLI. Callers are
principals resolved by an :class:`~kcp_opa.service.callers.Authenticator` per request, never
named in a request body; each tool call is scoped by the caller's roles, and every refusal is
written to the audit ledger. Control challenges live in the service's SQLite store, not with the
caller. ``guard`` puts the same gate in front of in-process tool functions and of other MCP
servers' ``tools/call``.
"""
