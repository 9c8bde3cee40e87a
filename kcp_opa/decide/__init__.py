"""Stage 3, decide: one frozen action in, one typed decision out.

Takes an action intent (JSON) and a bundle; refuses malformed actions and hashes the frozen
action (``action``), builds the engine input (``regoinput``), evaluates ``data.kcp.gate.decision``
in regopy (``engine``), types the result and fails closed (``gate``). ``query`` answers ad-hoc
queries the way ``opa eval`` does.
"""
