"""Analysis above the pipeline: prove invariants over a bundle's input space, diff two bundles.

``space`` derives the abstract input space from a bundle's data and its policies' METADATA;
``engines`` decides on regopy and OPA and checks the invariants (Rego, ``rego/builtin.rego``
and a deployment's own); ``prove``, ``diff`` and ``pin`` are the three commands' libraries.
"""
