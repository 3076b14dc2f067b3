"""The scheduling framework: what a plugin is, how plugins are registered, and how they are run.

- ``interface``: one small protocol per extension point (PreFilter + Filter,
  PreScore + Score + NormalizeScore) and the prepared forms they return;
- ``batch``: the optional whole-list form of a prepared filter;
- ``registry``: the immutable, ordered plugin set and its configuration errors;
- ``runtime``: runs a registry's filters and scores over one snapshot, the one
  runner that planning and ``explain`` share.

The framework never imports a plugin: the default set lives in
``kruntimes.pure.plugins.registry``.
"""
