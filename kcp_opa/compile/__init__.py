"""Stage 2, compile: declarations and policies into one deterministic OPA bundle.

Takes validated manifests, a matrix and the ``policies/`` directory; gives the Rego data document
(``datadoc``), checked policy files (``policyfiles``), the bundle tarball and its reader
(``bundle``), and the compiler that ties them together. ``enginecheck`` proves in a child process
that regopy loads the bundle before it is written.
"""
